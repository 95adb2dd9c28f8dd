"""Frames over a TCP socket, sealed once the handshake proved the secret.

Before the proof (the handshake only): kind (1 byte) | length (4, big
endian) | payload, at most MAX_UNPROVEN bytes. After seal(): kind | length |
seq (8) | payload | HMAC-SHA256(key, kind | length | seq | payload), with a
key per direction and connection and a sequence number that starts at 0
and goes up by one a frame. A wrong MAC, a sequence number out of order
(a replayed, dropped or reordered frame) or a frame over the limit is a
ChannelError: the caller drops the connection, acting on nothing of it.
Kind b"j" holds one JSON object; the other kinds hold bytes (a pickled
function or result, a daemon's output). Standard library only."""
import hashlib
import hmac
import json
import socket
import struct
import threading
import time

JSON = b"j"
MAX_UNPROVEN = 4096  # the handshake's messages are a few hundred bytes
_HEAD = struct.Struct(">cI")
_SEQ = struct.Struct(">Q")
_MAC_SIZE = hashlib.sha256().digest_size
_JOIN_BELOW = 1 << 16  # smaller frames go out in one sendall


class ChannelError(Exception):
    """A peer that broke the protocol or failed its proof; the connection is dropped."""


class PeerClosed(ChannelError):
    """The peer closed the connection (normal at the end)."""


def parse_json(payload):
    """One JSON object from `payload`; any failure (bad UTF-8, nesting too
    deep, not an object) is a ChannelError, never another exception."""
    try:
        message = json.loads(payload.decode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise ChannelError("a frame that is not JSON (%s)" % type(e).__name__)
    if not isinstance(message, dict):
        raise ChannelError("a message that is not a JSON object")
    return message


def _mac(key, header, payload):
    if len(payload) < _JOIN_BELOW:  # one call into OpenSSL for a small frame
        return hmac.digest(key, header + payload, "sha256")
    mac = hmac.new(key, header, "sha256")
    mac.update(payload)  # no copy of a large one
    return mac.digest()


class SealedChannel:
    def __init__(self, sock, limit):
        """`limit`: the largest payload accepted once sealed."""
        self.sock, self.proven_limit = sock, limit
        self._keys = None  # (send key, receive key) once sealed
        self._sent = self._received = 0
        self._deadline = None
        self._reader = None  # a buffered reader once sealed (no deadline to keep then)
        self._send_lock = threading.Lock()  # output relays send from two threads

    # -- before the proof ----------------------------------------------------
    def start_deadline(self, seconds):
        """Every receive until seal() must finish within `seconds` in all."""
        self._deadline = time.monotonic() + seconds

    def seal(self, send_key, receive_key):
        self._keys, self._deadline = (send_key, receive_key), None
        self.sock.settimeout(None)
        # The reads before the seal took exactly their bytes: nothing is lost
        # to this buffer, which saves a system call per part of each frame.
        self._reader = self.sock.makefile("rb", buffering=1 << 16)

    @property
    def sealed(self):
        return self._keys is not None

    # -- frames --------------------------------------------------------------
    def send_frame(self, kind, payload):
        payload = bytes(payload) if not isinstance(payload, bytes) else payload
        head = _HEAD.pack(kind, len(payload))
        with self._send_lock:
            if self._keys is None:
                parts = [head, payload]
            else:
                seq = _SEQ.pack(self._sent)
                self._sent += 1
                parts = [head + seq, payload, _mac(self._keys[0], head + seq, payload)]
            if len(payload) < _JOIN_BELOW:
                self.sock.sendall(b"".join(parts))
            else:
                for part in parts:
                    self.sock.sendall(part)

    def receive_frame(self):
        head = self._read(_HEAD.size)
        kind, length = _HEAD.unpack(head)
        limit = self.proven_limit if self._keys else MAX_UNPROVEN
        if length > limit:
            raise ChannelError("a frame of %d bytes (at most %d here)" % (length, limit))
        if self._keys is None:
            return kind, self._read(length)
        seq = self._read(_SEQ.size)
        payload = self._read(length)
        if not hmac.compare_digest(self._read(_MAC_SIZE), _mac(self._keys[1], head + seq, payload)):
            raise ChannelError("a frame whose MAC is wrong (not from the peer that proved "
                               "the secret)")
        number = _SEQ.unpack(seq)[0]
        if number != self._received:
            raise ChannelError("frame %d where %d was due (replayed or reordered)"
                               % (number, self._received))
        self._received += 1
        return kind, payload

    def send(self, message):
        self.send_frame(JSON, json.dumps(message).encode())

    def receive(self):
        kind, payload = self.receive_frame()
        if kind != JSON:
            raise ChannelError("expected a JSON frame, got kind %r" % kind)
        return parse_json(payload)

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if self._reader is not None:
            self._reader.close()
        self.sock.close()

    def _read(self, count):
        if self._reader is not None:
            data = self._reader.read(count)
            if len(data) < count:
                raise PeerClosed("the peer closed the connection")
            return data
        buffer, got = bytearray(count), 0
        view = memoryview(buffer)
        while got < count:
            if self._deadline is not None:
                left = self._deadline - time.monotonic()
                if left <= 0:
                    raise ChannelError("the handshake did not finish in time")
                self.sock.settimeout(left)
            try:
                n = self.sock.recv_into(view[got:], min(count - got, 1 << 20))
            except socket.timeout:
                raise ChannelError("the handshake did not finish in time")
            if not n:
                raise PeerClosed("the peer closed the connection")
            got += n
        return bytes(buffer)
