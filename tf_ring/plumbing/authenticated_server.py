"""A TCP service of the job whose connections must prove the job's secret
for this very service (tf_ring.plumbing.handshake) before its handler sees
them, and whose every frame after that is sealed: one thread per
connection (and one reading its frames once sealed), a bounded number not
yet proven and a bounded number proven; a connection that fails the
proof, runs out of time, breaks the protocol later or goes silent (no
heartbeat: tf_ring.plumbing.channel_beats) is dropped, counted by reason
and logged, and nothing of it is acted on."""
import threading

from tf_ring.plumbing import endpoints, handshake
from tf_ring.plumbing.refusals import Refusals
from tf_ring.plumbing.sealed_frames import ChannelError, PeerClosed
from tf_ring.plumbing.tcp_listener import TcpListener

MAX_PENDING = 32  # connections holding a thread before they proved the secret
MAX_PROVEN = 64  # connections served at once after the proof, unless the service says


class AuthenticatedServer:
    def __init__(self, secret, label, handler, bind_address, limit, name, backlog=64,
                 max_pending=MAX_PENDING, max_proven=MAX_PROVEN):
        """`handler(channel)` serves one sealed channel; `limit`: the largest
        message a proven peer may send; `label`: the service's kind, as its
        clients name it ("control", "task", "function"); `max_proven`: the
        connections it serves at once (one more is refused after its proof)."""
        self.secret, self.label, self.handler, self.limit = secret, label, handler, limit
        self.max_proven = max_proven
        self.service_id = endpoints.new_service_id()
        self.refusals = Refusals(label)
        self._proven, self._lock = 0, threading.Lock()
        self._listener = TcpListener(bind_address, self._serve, name, backlog, max_pending,
                                     self.refusals.add)

    @property
    def refused(self):
        return self.refusals.count

    @property
    def proven(self):
        """Connections being served now (proven, not yet closed)."""
        with self._lock:
            return self._proven

    @property
    def port(self):
        return self._listener.port

    def endpoint(self, addresses):
        """What clients are told to reach this service (endpoints.parse_endpoint)."""
        return endpoints.format_endpoint(self.service_id, addresses, self.port)

    def close(self):
        self._listener.close()

    def _serve(self, conn, settled):
        peer = _peer(conn)

        def dropped(error):  # the channel's reader: a broken or silent peer after the proof
            self.refusals.add(peer, "after the proof: %s" % error, error.reason)
        try:
            channel = handshake.serve(conn, self.secret, self.label, self.service_id, self.limit,
                                      dropped)
        except (ChannelError, OSError) as e:
            self.refusals.add(peer, "before the proof: %s" % e, "handshake")
            return
        settled()
        with self._lock:
            admitted = self._proven < self.max_proven
            self._proven += admitted
        if not admitted:
            self.refusals.add(peer, "%d proven connections are served already" % self.max_proven,
                              "proven cap")
            channel.close()
            return
        try:
            self.handler(channel)
        except PeerClosed:
            pass
        except (ChannelError, OSError, ValueError, TypeError, KeyError) as e:
            # Its reader counted the cause already, or the peer had closed
            # (a send after that fails, and is no fault of the peer's).
            if not (channel.reported or isinstance(channel.failure, PeerClosed)):
                self.refusals.add(peer, "%s: %s" % (type(e).__name__, e),
                                  getattr(e, "reason", "request"))
        finally:
            channel.close()
            with self._lock:
                self._proven -= 1


def _peer(conn):
    try:
        return conn.getpeername()
    except OSError:
        return None
