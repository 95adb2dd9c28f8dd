"""Length-prefixed frames over a socket: a 1-byte kind, a 4-byte big-endian
length, the payload. Kind b"j" holds one JSON object, so control_wire's
handshakes run over a FrameChannel unchanged; other kinds hold bytes (a
pickled function or result, a daemon's output), which control_wire's
64 KiB JSON lines cannot carry."""
import json
import socket
import struct
import threading

from tf_ring.plumbing import control_wire
from tf_ring.plumbing.control_wire import ChannelError, PeerClosed

JSON = b"j"
# The per-job secret every hosted connection proves; it travels in the
# environment (mpirun forwards it to the ranks), never on a command line.
SECRET_ENV = "TF_RING_HOSTED_SECRET"
_HEADER = struct.Struct(">cI")
# Before the peer proved the secret a frame may not exceed a JSON line's
# limit; afterwards (authenticated()) a pickled result may be large.
MAX_UNPROVEN = control_wire.MAX_LINE
MAX_PROVEN = 1 << 31


class FrameChannel:
    def __init__(self, sock):
        self.sock = sock
        self.limit = MAX_UNPROVEN
        self._send_lock = threading.Lock()  # output relays send from two threads

    def authenticated(self):
        self.limit = MAX_PROVEN

    def send_frame(self, kind, payload):
        with self._send_lock:
            self.sock.sendall(_HEADER.pack(kind, len(payload)) + payload)

    def receive_frame(self):
        kind, length = _HEADER.unpack(self._read(_HEADER.size))
        if length > self.limit:
            raise ChannelError("a frame of %d bytes (at most %d here)" % (length, self.limit))
        return kind, self._read(length)

    def send(self, message):
        self.send_frame(JSON, json.dumps(message).encode())

    def receive(self):
        kind, payload = self.receive_frame()
        if kind != JSON:
            raise ChannelError("expected a JSON frame, got kind %r" % kind)
        try:
            message = json.loads(payload)
        except ValueError:
            raise ChannelError("a frame that is not JSON")
        if not isinstance(message, dict):
            raise ChannelError("a message that is not an object")
        return message

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def _read(self, count):
        chunks, left = [], count
        while left:
            chunk = self.sock.recv(min(left, 1 << 20))
            if not chunk:
                raise PeerClosed("the peer closed the connection")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)


def connect(targets, secret, timeout=10.0):
    """An authenticated FrameChannel to the first of [(address, port)] that
    answers and proves `secret`; ChannelError naming every failure else."""
    channel = control_wire.connect_first(targets, secret, FrameChannel, timeout)
    channel.authenticated()
    return channel


def accept(sock, secret):
    """The serving side of a new connection: an authenticated FrameChannel,
    or ChannelError/OSError (the caller drops the connection)."""
    channel = FrameChannel(sock)
    sock.settimeout(control_wire.HANDSHAKE_TIMEOUT_S)
    control_wire.launcher_handshake(channel, secret)
    sock.settimeout(None)
    channel.authenticated()
    return channel


def format_targets(addresses, port):
    return "%s:%d" % (",".join(addresses), port)


def parse_targets(value):
    """[(address, port)] from "addr,addr,...:port"."""
    addresses, _, port = value.rpartition(":")
    return [(a, int(port)) for a in addresses.split(",") if a]
