"""A TCP listener whose connections must prove the job's secret before
their handler sees them: one thread per connection; a connection that
fails the proof or breaks the protocol is dropped and counted."""
from tf_ring.plumbing.control_wire import ChannelError, PeerClosed
from tf_ring.hosted import frames
from tf_ring.plumbing.tcp_listener import TcpListener


class Server:
    def __init__(self, secret, handler, bind_address="0.0.0.0", name="tf_ring-hosted"):
        """`handler(channel)` serves one authenticated FrameChannel."""
        self.secret, self.handler = secret, handler
        self.refused = 0
        self._listener = TcpListener(bind_address, self._serve, name)

    @property
    def port(self):
        return self._listener.port

    def close(self):
        self._listener.close()

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
