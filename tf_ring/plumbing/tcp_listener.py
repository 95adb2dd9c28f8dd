"""A listening TCP socket that hands each accepted connection to its own
thread; the control service and hosted jobs' services authenticate on top."""
import socket
import threading


class TcpListener:
    def __init__(self, bind_address, on_connection, name, backlog=64):
        """`on_connection(sock)` runs in a new daemon thread per connection."""
        self._on_connection = on_connection
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((bind_address, 0))
        self._sock.listen(backlog)
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name=name).start()

    @property
    def port(self):
        return self._sock.getsockname()[1]

    def close(self):
        """Stops accepting; connections already handed over go on."""
        self._closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()

    def _accept(self):
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._on_connection, args=(conn,), daemon=True).start()
