"""A TCP listener whose connections must prove the job's secret before
their handler sees them: one thread per connection; a connection that
fails the proof or breaks the protocol is dropped and counted."""
import socket
import threading

from tf_ring.elastic.control_wire import ChannelError, PeerClosed
from tf_ring.hosted import frames


class Server:
    def __init__(self, secret, handler, bind_address="0.0.0.0", name="tf_ring-hosted"):
        """`handler(channel)` serves one authenticated FrameChannel."""
        self.secret, self.handler = secret, handler
        self.refused = 0
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((bind_address, 0))
        self._sock.listen(64)
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name=name).start()

    @property
    def port(self):
        return self._sock.getsockname()[1]

    def close(self):
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
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        try:
            channel = frames.accept(conn, self.secret)
        except (ChannelError, OSError):
            self.refused += 1
            conn.close()
            return
        try:
            self.handler(channel)
        except PeerClosed:
            pass
        except (ChannelError, OSError, ValueError, TypeError, KeyError):
            self.refused += 1
        finally:
            channel.close()
