"""Frames over a TCP socket, sealed once the handshake proved the secret.

Before the proof (the handshake only): kind (1 byte) | length (4, big
endian) | payload, at most MAX_UNPROVEN bytes. After seal(): kind | length |
seq (8) | payload | HMAC-SHA256(key, kind | length | seq | payload), with a
key per direction and connection and a sequence number that starts at 0
and goes up by one a frame. A sealed frame holds at most PIECE bytes: a
longer message goes as pieces of kind MORE and a last piece of its own
kind, each with its own MAC, so the receiver allocates at most one piece
(about a megabyte) before it knows who sent it, and no more than the
channel's limit in all for a message from the proven peer. Kind BEAT is a
heartbeat (tf_ring.plumbing.channel_beats): its payload is the sender's
interval in milliseconds. A wrong MAC, a sequence number out of order (a
replayed, dropped or reordered frame), a frame over the limit, one cut
short, or a peer silent for the channel's timeout is a ChannelError: the
connection is dropped, nothing of it acted on. Kind b"j" holds one JSON
object; the other kinds hold bytes (a pickled function or result, a
daemon's output).

Once sealed, one reader thread per connection reads every frame as it
comes (the heartbeats included, whatever the channel's owner is busy
with) and hands whole messages to receive_frame(), a few at most ahead.
Standard library only."""
import collections
import hashlib
import hmac
import json
import socket
import struct
import threading
import time

from tf_ring.plumbing import channel_beats
from tf_ring.plumbing.channel_errors import ChannelError, PeerClosed
from tf_ring.plumbing.frame_wire import FrameWire

JSON, MORE, BEAT = b"j", b"+", b"h"
MAX_UNPROVEN = 4096  # the handshake's messages are a few hundred bytes
PIECE = 1 << 20  # the most a sealed frame holds: what junk can make a receiver allocate
_HEAD = struct.Struct(">cI")
_SEQ = struct.Struct(">Q")
_MAC_SIZE = hashlib.sha256().digest_size
_JOIN_BELOW = 1 << 16  # smaller frames go out in one sendall
_AHEAD = 4  # whole messages the reader may hold for a busy owner
_MAX_BEAT_MS = 10 ** 8
_RETRY_BEAT_S = 0.05  # after a beat skipped because a frame was going out
LINGER_S = 2.0  # close() waits this long at most for the peer to close too


def parse_json(payload):
    """One JSON object from `payload`; any failure (bad UTF-8, nesting too
    deep, not an object) is a ChannelError, never another exception."""
    try:
        message = json.loads(bytes(payload).decode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise ChannelError("a frame that is not JSON (%s)" % type(e).__name__, "json")
    if not isinstance(message, dict):
        raise ChannelError("a message that is not a JSON object", "json")
    return message


def _mac(key, header, payload):
    if len(payload) < _JOIN_BELOW:  # one call into OpenSSL for a small frame
        return hmac.digest(key, header + payload, "sha256")
    mac = hmac.new(key, header, "sha256")
    mac.update(payload)  # no copy of a large one
    return mac.digest()


class SealedChannel:
    def __init__(self, sock, limit, on_failure=None):
        """`limit`: the largest message accepted once sealed. `on_failure(error)`:
        called once, from the reader thread, when the peer breaks the
        protocol or goes silent after the seal (not when it closes)."""
        self.sock, self.proven_limit = sock, limit
        self._on_failure = on_failure
        self._keys = None  # (send key, receive key) once sealed
        self._sent = self._received = 0
        self._deadline = None
        self._send_lock = threading.Lock()  # output relays send from two threads
        self._arrived = threading.Condition()
        self._inbox = collections.deque()  # whole messages the reader has checked
        self.failure = None  # the ChannelError that ended the reader, once it ended
        self.reported = False  # on_failure was called
        self._closing = self._draining = False
        self._reader = None  # the reader thread, once sealed
        self._timeout = self._interval = None
        self._peer_interval = 0.0
        self._last_sent = self._retry_beat_at = 0.0

    # -- before the proof ----------------------------------------------------
    def start_deadline(self, seconds):
        """Every receive until seal() must finish within `seconds` in all."""
        self._deadline = time.monotonic() + seconds

    def seal(self, send_key, receive_key):
        """From now on every frame is sealed, read by this channel's reader
        thread, and the channel beats (tf_ring.plumbing.channel_beats)."""
        self._timeout = channel_beats.timeout_s()
        self._interval = self._timeout / 3.0
        self._keys, self._deadline = (send_key, receive_key), None
        self.sock.settimeout(None)
        with self._send_lock:  # the first frame: our interval, before any of the owner's
            self._send_sealed(BEAT, self._beat_payload())
        wire = FrameWire(self.sock, self.allowed_silence)
        self._reader = threading.Thread(target=self._read_all, args=(wire,), daemon=True,
                                        name="tf_ring-channel-reader")
        self._reader.start()
        channel_beats.BEATER.add(self)

    @property
    def sealed(self):
        return self._keys is not None

    @property
    def dropped(self):
        """True once the connection ended (closed by the peer, broken, or dropped)."""
        with self._arrived:
            return self.failure is not None and not self._inbox

    def allowed_silence(self):
        """The seconds the peer may send nothing before it counts as frozen:
        this side's timeout, or three of the peer's beat intervals if longer."""
        return max(self._timeout, 3.0 * self._peer_interval)

    # -- frames --------------------------------------------------------------
    def send_frame(self, kind, payload):
        if kind in (MORE, BEAT):
            raise ValueError("frame kind %r is the channel's own" % kind)
        payload = payload if isinstance(payload, bytes) else bytes(payload)
        with self._send_lock:
            if self._keys is None:
                self._send_plain(kind, payload)
                return
            view, last = memoryview(payload), max(len(payload) - 1, 0) // PIECE * PIECE
            for start in range(0, last, PIECE):
                self._send_sealed(MORE, view[start:start + PIECE])
            self._send_sealed(kind, view[last:])

    def send(self, message):
        self.send_frame(JSON, json.dumps(message).encode())

    def receive_frame(self):
        """The next (kind, payload); ChannelError (PeerClosed at a clean end)
        once the connection ended and every message before that was taken."""
        if self._keys is None:
            head = self._read(_HEAD.size)
            kind, length = _HEAD.unpack(head)
            if length > MAX_UNPROVEN:
                raise ChannelError("a frame of %d bytes (at most %d here)"
                                   % (length, MAX_UNPROVEN), "oversized")
            return kind, self._read(length)
        with self._arrived:
            while not self._inbox and self.failure is None:
                self._arrived.wait()
            if self._inbox:
                message = self._inbox.popleft()
                self._arrived.notify_all()
                return message
            raise self.failure.again()

    def receive(self):
        kind, payload = self.receive_frame()
        if kind != JSON:
            raise ChannelError("expected a JSON frame, got kind %r" % kind)
        return parse_json(payload)

    def close(self):
        """Ends the connection. A sealed one first lets what was sent reach
        the peer: it half-closes and reads on until the peer closes too
        (LINGER_S at most), since closing with a heartbeat unread would
        reset the connection and could lose the last frame on its way."""
        channel_beats.BEATER.remove(self)
        with self._arrived:
            self._draining = True  # the reader drops what still comes
            self._arrived.notify_all()
            reader = self._reader if self.failure is None else None
        if reader is not None:
            try:
                self.sock.shutdown(socket.SHUT_WR)
                reader.join(LINGER_S)
            except OSError:
                pass
        with self._arrived:
            self._closing = True
            self._arrived.notify_all()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    # -- heartbeats (the process's beat thread calls these) -------------------
    def beat_due(self):
        return max(self._last_sent + self._interval, self._retry_beat_at)

    def beat(self):
        """Sends a heartbeat unless a frame is going out (that tells the peer
        as much) or the peer is not taking bytes (it is frozen, and its
        silence drops it here; or its reader waits for its own owner, and
        then it does not count our silence either)."""
        self._retry_beat_at = time.monotonic() + _RETRY_BEAT_S
        if not self._send_lock.acquire(blocking=False):
            return
        try:
            if channel_beats.writable(self.sock):
                self._send_sealed(BEAT, self._beat_payload())
        except OSError:
            pass  # the reader sees the connection end
        finally:
            self._send_lock.release()

    def _beat_payload(self):
        return b"%d" % max(1, round(self._interval * 1000))

    # -- the wire ------------------------------------------------------------
    def _send_plain(self, kind, payload):
        self.sock.sendall(_HEAD.pack(kind, len(payload)) + payload)

    def _send_sealed(self, kind, piece):
        """One sealed frame (the send lock held)."""
        head = _HEAD.pack(kind, len(piece)) + _SEQ.pack(self._sent)
        self._sent += 1
        mac = _mac(self._keys[0], head, piece)
        if len(piece) < _JOIN_BELOW:
            self.sock.sendall(b"".join([head, piece, mac]))
        else:
            for part in (head, piece, mac):
                self.sock.sendall(part)
        self._last_sent = time.monotonic()

    def _read_all(self, wire):
        """The reader thread: every frame until the connection ends."""
        try:
            while True:
                message = self._read_message(wire)
                with self._arrived:
                    while len(self._inbox) >= _AHEAD and not self._draining:
                        self._arrived.wait()
                    if self._draining:
                        continue
                    self._inbox.append(message)
                    self._arrived.notify_all()
        except (ChannelError, OSError, ValueError) as e:
            self._end(e)

    def _end(self, error):
        channel_beats.BEATER.remove(self)
        if self._closing or (self._draining and isinstance(error, PeerClosed)):
            error = PeerClosed("closed here")
        elif not isinstance(error, ChannelError):  # a reset, or the socket closed under us
            error = PeerClosed("the connection broke (%s)" % error)
        if isinstance(error, PeerClosed):
            with self._arrived:
                self.failure = error
                self._arrived.notify_all()
            try:  # the peer closed: nothing more goes its way, and a close() of its waits no more
                self.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            return
        try:  # the peer hears of it at once, and a send blocked on it returns
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if self._on_failure is not None:
            self.reported = True
            self._on_failure(error)
        with self._arrived:
            self.failure = error
            self._arrived.notify_all()

    def _read_message(self, wire):
        pieces, total = [], 0
        while True:
            kind, piece = self._read_piece(wire)
            if kind == BEAT:
                self._peer_interval = _beat_interval(piece)
                continue
            total += len(piece)
            if total > self.proven_limit:
                raise ChannelError("a message of more than %d bytes (at most %d here)"
                                   % (total, self.proven_limit), "oversized")
            pieces.append(piece)
            if kind != MORE:
                return kind, bytes(piece) if len(pieces) == 1 else b"".join(pieces)

    def _read_piece(self, wire):
        head = wire.read(_HEAD.size, at_boundary=True)
        kind, length = _HEAD.unpack(head)
        if length > min(PIECE, self.proven_limit):
            raise ChannelError("a frame of %d bytes (at most %d here)"
                               % (length, min(PIECE, self.proven_limit)), "oversized")
        seq = bytes(wire.read(_SEQ.size))
        body = wire.read(length + _MAC_SIZE)  # the payload and its MAC
        expected = _mac(self._keys[1], bytes(head) + seq, memoryview(body)[:length])
        if not hmac.compare_digest(body[length:], expected):
            raise ChannelError("a frame whose MAC is wrong (not from the peer that proved "
                               "the secret)", "mac")
        number = _SEQ.unpack(seq)[0]
        if number != self._received:
            raise ChannelError("frame %d where %d was due (replayed or reordered)"
                               % (number, self._received), "sequence")
        self._received += 1
        del body[length:]  # in place: the payload, not copied
        return kind, body

    def _read(self, count):
        """Exactly `count` bytes before the seal, within the handshake's deadline."""
        buffer, got = bytearray(count), 0
        view = memoryview(buffer)
        while got < count:
            if self._deadline is not None:
                left = self._deadline - time.monotonic()
                if left <= 0:
                    raise ChannelError("the handshake did not finish in time", "handshake")
                self.sock.settimeout(left)
            try:
                n = self.sock.recv_into(view[got:], min(count - got, 1 << 20))
            except socket.timeout:
                raise ChannelError("the handshake did not finish in time", "handshake")
            if not n:
                raise PeerClosed("the peer closed the connection")
            got += n
        return bytes(buffer)


def _beat_interval(payload):
    """The peer's beat interval in seconds, from its heartbeat."""
    text = bytes(payload)
    if not (text.isdigit() and 0 < int(text) <= _MAX_BEAT_MS):
        raise ChannelError("a heartbeat without a valid interval", "protocol")
    return int(text) / 1000.0
