"""The errors of the job's sealed channels (tf_ring.plumbing.sealed_frames):
each carries a short `reason`, the key services count refusals under
(tf_ring.plumbing.refusals). Standard library only."""


class ChannelError(Exception):
    """A peer that broke the protocol, failed its proof or went silent; the
    connection is dropped. `reason`: "mac", "sequence", "oversized",
    "truncated", "silent", "handshake", "protocol", ..."""

    def __init__(self, message, reason="protocol"):
        super().__init__(message)
        self.reason = reason

    def again(self):
        """A fresh copy to raise in another thread (the same message and reason)."""
        return type(self)(str(self), self.reason)


class PeerClosed(ChannelError):
    """The peer closed the connection (normal at the end)."""

    def __init__(self, message, reason="closed"):
        super().__init__(message, reason)
