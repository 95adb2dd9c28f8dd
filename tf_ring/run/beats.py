"""Heartbeats over UDP, straight from each rank's host to the launcher.

The status lines' beats (job_watch) reach the launcher through Open MPI's
output forwarding: a TCP connection from the host's daemon that shares the
job's links. On a link saturated by large allreduces that connection loses
packets and backs off, and its beats arrived up to 9 s late on the
simulated hosts. A datagram does not back off: one lost beat is only one,
and the next follows half a second later. Both paths count; a host is
declared lost only when neither brought anything for --detection-timeout.

Every datagram is signed with a per-job secret (HMAC-SHA256) and carries a
sequence number per sender; the listener drops a datagram with a wrong
signature or job token, or one it has already seen, and counts it.

    python -m tf_ring.run.beats RANK WRAPPER_PID   # the sender, run by the rank wrapper
"""
import hashlib
import hmac
import os
import secrets
import select
import socket
import sys
import threading
import time

from tf_ring.plumbing import env_names, interface_addresses

INTERVAL_S = 0.5


def sign(secret, fields):
    """The datagram for `fields` (text): the fields, then their signature."""
    body = " ".join(fields).encode()
    return body + b" " + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest().encode()


def verify(secret, datagram):
    """The fields of a correctly signed datagram, or None."""
    body, _, signature = datagram.rpartition(b" ")
    expected = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest().encode()
    if not body or not hmac.compare_digest(signature, expected):
        return None
    return body.decode(errors="replace").split(" ")


class Listener(object):
    """The launcher's end: calls `on_beat(rank)` for each valid beat of
    this job. The secret, not the address, decides what counts; still,
    given `addresses` (those of --network-interface) it listens on those
    alone, one port for all, so other networks cannot reach it. Without
    them it listens on every address."""

    def __init__(self, token, on_beat=None, addresses=None):
        self.token, self.on_beat = token, on_beat
        self.secret = secrets.token_hex(16)
        self.refused = 0
        self._last_seq = {}  # (rank, sender) -> highest sequence number seen
        self.addresses = list(addresses) if addresses else None
        self._socks = _bind_one_port(self.addresses or ["0.0.0.0"])
        self._closed = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def environment(self):
        """What the rank wrappers need, for mpirun to forward to every host."""
        port = self._socks[0].getsockname()[1]
        return {env_names.BEAT_TO: "%s:%d" % (",".join(self.addresses or interface_addresses.local_addresses()), port),
                env_names.BEAT_SECRET: self.secret, env_names.BEAT_TOKEN: self.token}

    def close(self):
        self._closed = True
        for sock in self._socks:
            sock.close()

    def _serve(self):
        while not self._closed:
            try:
                ready, _, _ = select.select(self._socks, [], [], 0.5)
                for sock in ready:
                    self._take(sock.recv(512))
            except (OSError, ValueError):
                return  # closed

    def _take(self, datagram):
        fields = verify(self.secret, datagram)
        if (fields is None or len(fields) != 4 or fields[0] != self.token
                or not fields[1].isdigit() or not fields[3].isdigit()):
            self.refused += 1
            return
        rank, sender, seq = int(fields[1]), fields[2], int(fields[3])
        if seq <= self._last_seq.get((rank, sender), -1):
            self.refused += 1  # a replay, or one overtaken by a later beat
            return
        self._last_seq[(rank, sender)] = seq
        if self.on_beat is not None:
            self.on_beat(rank)


def _bind_one_port(addresses, tries=20):
    """UDP sockets on each of `addresses`, all on the same free port (the
    wrappers get one port); another port is tried when one is taken."""
    for _ in range(tries):
        socks = []
        try:
            for address in addresses:
                sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                socks.append(sock)
                sock.bind((address, socks[0].getsockname()[1] if len(socks) > 1 else 0))
            return socks
        except OSError:
            for sock in socks:
                sock.close()
    raise OSError("no free UDP port on all of %s for the heartbeat listener" % ", ".join(addresses))


def _alive(pid):
    try:
        os.kill(pid, 0)
        with open("/proc/%d/status" % pid) as f:
            return not any(line.startswith("State:") and "Z" in line for line in f)
    except OSError:
        return False


def send_while_alive(rank, wrapper_pid, environ=os.environ, interval=INTERVAL_S):
    """Beats for `rank` to every launcher address until the wrapper ends."""
    addresses, _, port = environ[env_names.BEAT_TO].rpartition(":")
    targets = [(a, int(port)) for a in addresses.split(",") if a]
    secret, token = environ[env_names.BEAT_SECRET], environ[env_names.BEAT_TOKEN]
    sender = secrets.token_hex(4)  # a new sender (world) starts its numbers at 0
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        seq = 0
        while _alive(wrapper_pid):
            datagram = sign(secret, [token, str(rank), sender, str(seq)])
            for target in targets:
                try:
                    sock.sendto(datagram, target)
                except OSError:
                    pass  # no route from this host to that address
            seq += 1
            time.sleep(interval)


if __name__ == "__main__":
    if env_names.BEAT_TO in os.environ and sys.argv[1].isdigit():
        send_while_alive(int(sys.argv[1]), int(sys.argv[2]))
