"""The receiving end of a sealed channel's socket (tf_ring.plumbing.sealed_frames):
exact reads that allocate no more than they are asked for, and that give
up once the peer has sent nothing at all for the allowed silence.

The socket stays blocking (other threads send on it with sendall): a read
tries a non-blocking recv first and waits in poll() only when nothing is
there, so the silence is measured where the reader waits for the peer, not
while its own consumer is busy. Standard library only."""
import select
import socket

from tf_ring.plumbing.channel_errors import ChannelError, PeerClosed

_SMALL = 1 << 16  # reads up to this go through one buffer (a frame's head, small frames)


class FrameWire:
    def __init__(self, sock, allowed_silence):
        """`allowed_silence()`: the seconds the peer may stay silent now."""
        self.sock, self._allowed = sock, allowed_silence
        self._buffer = bytearray()
        self._poller = select.poll()
        self._poller.register(sock, select.POLLIN)

    def read(self, count, at_boundary=False):
        """Exactly `count` bytes (a bytearray of that size, nothing larger):
        PeerClosed when the peer closed at a frame's boundary
        (`at_boundary` and nothing of the frame came), else ChannelError
        for a frame cut short or a silent peer."""
        if count <= _SMALL:
            while len(self._buffer) < count:
                self._fill(_SMALL, at_boundary and not self._buffer)
            data = self._buffer[:count]
            del self._buffer[:count]
            return data
        out = bytearray(count)
        got = len(self._buffer)
        out[:got] = self._buffer
        self._buffer = bytearray()
        view = memoryview(out)
        while got < count:
            got += self._receive_into(view[got:])
        return out

    def _fill(self, size, at_boundary):
        while True:
            try:
                chunk = self.sock.recv(size, socket.MSG_DONTWAIT)
                break
            except BlockingIOError:
                self._wait()
        if not chunk:
            raise _closed(at_boundary)
        self._buffer += chunk

    def _receive_into(self, view):
        while True:
            try:
                n = self.sock.recv_into(view, len(view), socket.MSG_DONTWAIT)
                break
            except BlockingIOError:
                self._wait()
        if not n:
            raise _closed(False)
        return n

    def _wait(self):
        allowed = self._allowed()
        if not self._poller.poll(int(allowed * 1000) + 1):
            raise ChannelError("nothing from the peer for %.3g s, not even a heartbeat (a frozen, "
                               "hung or cut-off process)" % allowed, "silent")


def _closed(at_boundary):
    if at_boundary:
        return PeerClosed("the peer closed the connection")
    return ChannelError("a truncated frame (the connection ended inside it)", "truncated")
