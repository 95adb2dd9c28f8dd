"""The wire of the control channel between tfringrun's elastic driver and
the job's rank 0, which may run on any host (docs/elastic.md).

TCP, one JSON object a line. A connection starts with a mutual proof of the
per-job secret (TF_RING_ELASTIC_SECRET, forwarded by mpirun in the
environment, never on a command line): the launcher sends a fresh nonce,
the rank answers with its own nonce and HMAC-SHA256(secret, "rank", both
nonces), and the launcher proves itself the same way in return. Neither side
acts on anything before the proofs hold, so a process without the secret
can neither feed rank 0 notices nor read or change the launcher's view.
Standard library only: the launcher imports it without TensorFlow."""
import hashlib
import hmac
import json
import os
import socket

ADDRESS_ENV = "TF_RING_CONTROL_TO"  # "addr,addr,...:port": the launcher's addresses
SECRET_ENV = "TF_RING_ELASTIC_SECRET"
MAX_LINE = 64 * 1024  # notices and reports are short; a longer line is refused
HANDSHAKE_TIMEOUT_S = 5.0


class ChannelError(Exception):
    """A peer that broke the protocol or failed its proof; the connection is dropped."""


def _proof(secret, role, first, second):
    return hmac.new(secret.encode(), b"|".join([role, first.encode(), second.encode()]),
                    hashlib.sha256).hexdigest()


class PeerClosed(ChannelError):
    """The peer closed the connection (normal at the end)."""


class Channel:
    """JSON lines over a connected socket."""

    def __init__(self, sock):
        self.sock = sock
        self._reader = sock.makefile("rb")

    def send(self, message):
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def receive(self):
        line = self._reader.readline(MAX_LINE + 1)
        if not line:
            raise PeerClosed("the peer closed the connection")
        if not line.endswith(b"\n"):
            raise ChannelError("a line longer than %d bytes" % MAX_LINE)
        try:
            message = json.loads(line)
        except ValueError:
            raise ChannelError("a line that is not JSON")
        if not isinstance(message, dict):
            raise ChannelError("a message that is not an object")
        return message

    def close(self):
        try:
            self._reader.close()
        finally:
            self.sock.close()


def _text_field(message, name):
    value = message.get(name)
    if not isinstance(value, str) or not value.isascii() or len(value) > 128:
        raise ChannelError("no valid %r in the handshake" % name)
    return value


def launcher_handshake(channel, secret):
    """The launcher's side: returns once the rank proved the secret."""
    mine = os.urandom(16).hex()
    channel.send({"nonce": mine})
    reply = channel.receive()
    theirs, proof = _text_field(reply, "nonce"), _text_field(reply, "proof")
    if not hmac.compare_digest(proof.encode(), _proof(secret, b"rank", mine, theirs).encode()):
        raise ChannelError("wrong proof of the job's secret")
    channel.send({"proof": _proof(secret, b"launcher", theirs, mine)})


def rank_handshake(channel, secret):
    """The rank's side: returns once the launcher proved the secret."""
    theirs = _text_field(channel.receive(), "nonce")
    mine = os.urandom(16).hex()
    channel.send({"nonce": mine, "proof": _proof(secret, b"rank", theirs, mine)})
    proof = _text_field(channel.receive(), "proof")
    if not hmac.compare_digest(proof.encode(), _proof(secret, b"launcher", mine, theirs).encode()):
        raise ChannelError("the launcher's proof of the job's secret is wrong")


def connect_first(targets, secret, channel_class, timeout):
    """A `channel_class` connection to the first of [(address, port)] that
    answers and proves `secret` (the rank's side of the handshake);
    ChannelError naming every address's failure otherwise."""
    problems = []
    for address, port in targets:
        try:
            sock = socket.create_connection((address, port), timeout=timeout)
        except OSError as e:
            problems.append("%s:%d: %s" % (address, port, e))
            continue
        channel = channel_class(sock)
        try:
            sock.settimeout(HANDSHAKE_TIMEOUT_S)
            rank_handshake(channel, secret)
            sock.settimeout(None)
            return channel
        except (OSError, ChannelError) as e:
            channel.close()
            problems.append("%s:%d: %s" % (address, port, e))
    raise ChannelError("; ".join(problems) or "no address to connect to")
