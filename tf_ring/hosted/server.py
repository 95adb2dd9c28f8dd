"""The listener of a hosted job's services (task and function services):
tf_ring.plumbing's authenticated server with the hosted frames' limits."""
from tf_ring.hosted import frames
from tf_ring.plumbing.authenticated_server import MAX_PROVEN, AuthenticatedServer


class Server(AuthenticatedServer):
    def __init__(self, secret, label, handler, bind_address="0.0.0.0", name="tf_ring-hosted",
                 max_proven=MAX_PROVEN):
        """`handler(channel)` serves one sealed channel of a client that
        proved `secret` for this `label` service; `max_proven`: the
        connections it serves at once."""
        super().__init__(secret, label, handler, bind_address, frames.LIMITS[label], name,
                         max_proven=max_proven)
