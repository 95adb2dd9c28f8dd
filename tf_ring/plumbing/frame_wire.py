"""The receiving end of a sealed channel's socket (tf_ring.plumbing.sealed_frames):
exact reads that allocate no more than they are asked for, and that give
up once the peer has sent nothing at all for the allowed silence.

The socket stays blocking (other threads send on it with sendall); its
receive timeout (SO_RCVTIMEO, which leaves sends alone) is the allowed
silence, so a read that gets no byte for that long fails, one that gets
some goes on: the silence is measured where the reader waits for the
peer, not while its own consumer is busy. Standard library only."""
import socket
import struct

from tf_ring.plumbing.channel_errors import ChannelError, PeerClosed

_SMALL = 1 << 16  # reads up to this go through one buffer (a frame's head, small frames)
_TIMEVAL = struct.Struct("ll")  # Linux's struct timeval


class FrameWire:
    def __init__(self, sock, allowed_silence):
        """`allowed_silence()`: the seconds the peer may stay silent now."""
        self.sock, self._allowed = sock, allowed_silence
        self._buffer = bytearray()
        self._timeout = None  # the SO_RCVTIMEO set now

    def read(self, count, at_boundary=False):
        """Exactly `count` bytes (a bytearray of that size, nothing larger):
        PeerClosed when the peer closed at a frame's boundary
        (`at_boundary` and nothing of the frame came), else ChannelError
        for a frame cut short or a silent peer."""
        if count <= _SMALL:
            while len(self._buffer) < count:
                chunk = self._receive(self.sock.recv, _SMALL)
                if not chunk:
                    raise _closed(at_boundary and not self._buffer)
                self._buffer += chunk
            data = self._buffer[:count]
            del self._buffer[:count]
            return data
        out = bytearray(count)
        got = len(self._buffer)
        out[:got] = self._buffer
        self._buffer = bytearray()
        view = memoryview(out)
        while got < count:  # most often one call: the kernel waits for all of it
            n = self._receive(self.sock.recv_into, view[got:], count - got, socket.MSG_WAITALL)
            if not n:
                raise _closed(False)
            got += n
        return out

    def _receive(self, call, *args):
        allowed = self._allowed()
        if allowed != self._timeout:
            seconds = int(allowed)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO,
                                 _TIMEVAL.pack(seconds, int((allowed - seconds) * 1e6)))
            self._timeout = allowed
        try:
            return call(*args)
        except BlockingIOError:  # not a byte for the whole timeout
            raise ChannelError("nothing from the peer for %.3g s, not even a heartbeat (a frozen, "
                               "hung or cut-off process)" % allowed, "silent")


def _closed(at_boundary):
    if at_boundary:
        return PeerClosed("the peer closed the connection")
    return ChannelError("a truncated frame (the connection ended inside it)", "truncated")
