"""A listening TCP socket that hands each accepted connection to its own
thread; the control service and hosted jobs' services authenticate on top
(tf_ring.plumbing.authenticated_server).

State before a peer proves the job's secret is bounded: at most
`max_pending` connections wait to settle (prove it or get dropped; the
handshake has one total deadline). One more evicts the oldest, which is
shut down: a flood of idle connections holds `max_pending` threads, not
one per connection, and a real client, whose proof takes a round trip, is
not locked out by connections that never speak. The accept loop outlives
everything but close(): a failed Thread.start (a container's pids limit)
or accept (out of file descriptors) drops that connection, pauses briefly
and goes on."""
import collections
import itertools
import socket
import threading
import time

PAUSE_AFTER_FAILURE_S = 0.05


class TcpListener:
    def __init__(self, bind_address, on_connection, name, backlog=64, max_pending=32,
                 on_refused=None):
        """`on_connection(sock, settled)` runs in a new daemon thread per
        connection; it calls `settled()` once the peer proved itself (its
        return settles it too). `on_refused(peer, why, reason)` hears of each
        connection dropped here without reaching on_connection, and of each
        failed accept."""
        self._on_connection = on_connection
        self._on_refused = on_refused or (lambda peer, why, reason: None)
        self._max_pending = max_pending
        self._pending = collections.OrderedDict()  # number -> socket, oldest first
        self._numbers = itertools.count()
        self._lock = threading.Lock()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((bind_address, 0))
        self._sock.listen(backlog)
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name=name).start()

    @property
    def port(self):
        return self._sock.getsockname()[1]

    @property
    def pending(self):
        """Connections that have not settled yet."""
        with self._lock:
            return len(self._pending)

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
                conn, peer = self._sock.accept()
            except OSError as e:
                if self._closed:
                    return
                self._on_refused(None, "accept failed (%s)" % e, "accept")
                time.sleep(PAUSE_AFTER_FAILURE_S)  # e.g. EMFILE: the backlog waits
                continue
            number = next(self._numbers)
            with self._lock:
                evicted = (self._pending.popitem(last=False)[1]
                           if len(self._pending) >= self._max_pending else None)
                self._pending[number] = conn
            if evicted is not None:
                _shut(evicted)  # its thread's read ends, and it is refused there
            try:
                threading.Thread(target=self._run, args=(conn, peer, number), daemon=True).start()
            except Exception as e:  # noqa: B902 - RuntimeError: can't start new thread
                self._settle(number)
                conn.close()
                self._on_refused(peer, "no thread to serve it (%s)" % e, "thread")
                time.sleep(PAUSE_AFTER_FAILURE_S)

    def _settle(self, number):
        with self._lock:
            self._pending.pop(number, None)

    def _run(self, conn, peer, number):
        try:
            self._on_connection(conn, lambda: self._settle(number))
        except Exception as e:  # noqa: B902 - a handler's bug must not leak the slot or socket
            self._on_refused(peer, "%s: %s" % (type(e).__name__, e), "bug")
        finally:
            self._settle(number)
            conn.close()


def _shut(conn):
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
