"""The listener of a hosted job's services (task and function services):
tf_ring.plumbing's authenticated server with the hosted frames' limit."""
from tf_ring.hosted import frames
from tf_ring.plumbing.authenticated_server import AuthenticatedServer


class Server(AuthenticatedServer):
    def __init__(self, secret, label, handler, bind_address="0.0.0.0", name="tf_ring-hosted"):
        """`handler(channel)` serves one sealed channel of a client that
        proved `secret` for this `label` service."""
        super().__init__(secret, label, handler, bind_address, frames.MAX_PROVEN, name)
