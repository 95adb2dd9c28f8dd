"""A TCP service of the job whose connections must prove the job's secret
for this very service (tf_ring.plumbing.handshake) before its handler sees
them, and whose every frame after that is sealed: one thread per
connection, a bounded number not yet proven; a connection that fails the
proof, runs out of time, or breaks the protocol later is dropped, counted
and logged, and nothing of it is acted on."""
from tf_ring.plumbing import endpoints, handshake
from tf_ring.plumbing.refusals import Refusals
from tf_ring.plumbing.sealed_frames import ChannelError, PeerClosed
from tf_ring.plumbing.tcp_listener import TcpListener

MAX_PENDING = 32  # connections holding a thread before they proved the secret


class AuthenticatedServer:
    def __init__(self, secret, label, handler, bind_address, limit, name, backlog=64,
                 max_pending=MAX_PENDING):
        """`handler(channel)` serves one sealed channel; `limit`: the largest
        frame a proven peer may send; `label`: the service's kind, as its
        clients name it ("control", "task", "function")."""
        self.secret, self.label, self.handler, self.limit = secret, label, handler, limit
        self.service_id = endpoints.new_service_id()
        self.refusals = Refusals(label)
        self._listener = TcpListener(bind_address, self._serve, name, backlog, max_pending,
                                     self.refusals.add)

    @property
    def refused(self):
        return self.refusals.count

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
        try:
            channel = handshake.serve(conn, self.secret, self.label, self.service_id, self.limit)
        except (ChannelError, OSError) as e:
            self.refusals.add(peer, "before the proof: %s" % e)
            return
        settled()
        try:
            self.handler(channel)
        except PeerClosed:
            pass
        except (ChannelError, OSError, ValueError, TypeError, KeyError) as e:
            self.refusals.add(peer, "%s: %s" % (type(e).__name__, e))
        finally:
            channel.close()


def _peer(conn):
    try:
        return conn.getpeername()
    except OSError:
        return None
