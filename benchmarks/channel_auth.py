"""What sealing every frame costs (issue 47): the wire before it, unsealed,
against tf_ring.plumbing's sealed frames (a sequence number and an
HMAC-SHA256 per frame), over the same loopback TCP connection shapes and
the same payloads, in one run.

    flock /work/locks/heavy python benchmarks/channel_auth.py

- commit: what rank 0's elastic commit asks the control service (one
  "notices" request and its answer; the mirror thread's "committed" report
  is the same shape). Before: JSON lines (the old control wire); after:
  sealed JSON frames.
- result N: a hosted rank's result transfer, a "result" request, a result
  frame of N bytes and the service's answer. Before: the old hosted frames
  (kind, length, payload); after: sealed frames.
- commit message, CPU only: one request sent and received by one thread
  over a socket pair (no second process, no scheduler): the wire's own cost.
- handshake: a new connection's proof of the secret (sealed keys included),
  once per connection; absolute only.

The server runs in a child process (its own interpreter lock), pinned to
one core and the client to another. Times are medians of interleaved
blocks in random order (the machine's drift lands on both wires)."""
import argparse
import json
import multiprocessing
import os
import random
import socket
import statistics
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tf_ring.plumbing import endpoints, handshake  # noqa: E402
from tf_ring.plumbing.sealed_frames import SealedChannel  # noqa: E402

HEAD = struct.Struct(">cI")
KEYS = (b"c" * 32, b"s" * 32)  # client->service, service->client
SIZES = [1 << 10, 1 << 20, 16 << 20, 64 << 20]


class OldLines:
    """The control wire before issue 47: one JSON object a line."""

    def __init__(self, sock):
        self.sock, self._reader = sock, sock.makefile("rb")

    def send(self, message):
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def receive(self):
        return json.loads(self._reader.readline(64 * 1024 + 1))


class OldFrames:
    """The hosted frames before issue 47: kind, length, payload."""

    def __init__(self, sock):
        self.sock = sock

    def send_frame(self, kind, payload):
        self.sock.sendall(HEAD.pack(kind, len(payload)) + payload)

    def receive_frame(self):
        kind, length = HEAD.unpack(self._read(HEAD.size))
        return kind, self._read(length)

    def send(self, message):
        self.send_frame(b"j", json.dumps(message).encode())

    def receive(self):
        return json.loads(self.receive_frame()[1])

    def _read(self, count):
        chunks, left = [], count
        while left:
            chunk = self.sock.recv(min(left, 1 << 20))
            if not chunk:
                raise ConnectionError("closed")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)


def sealed(sock, client):
    channel = SealedChannel(sock, 1 << 31)
    channel.seal(*(KEYS if client else KEYS[::-1]))
    return channel


WIRES = {"old lines": lambda s, c: OldLines(s), "old frames": lambda s, c: OldFrames(s),
         "sealed": sealed}


def pin(cpu):
    """Every wire's server on one core and the client on another: where the
    scheduler puts two processes decides a round trip's time more than the
    wire does, so each wire gets the same placement."""
    if len(os.sched_getaffinity(0)) > 1:
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[cpu]})


def serve(wire, listener):
    pin(1)
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    channel = WIRES[wire](conn, False)
    try:
        while True:
            request = channel.receive()
            if request["op"] == "result":
                channel.receive_frame()
                channel.send({"ok": True})
            else:
                channel.send({"notices": [], "next": request["since"]})
    except (ConnectionError, OSError, ValueError, struct.error, Exception):  # noqa: B902
        pass  # the client closed


def connect(wire):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    child = multiprocessing.get_context("fork").Process(target=serve, args=(wire, listener),
                                                        daemon=True)
    child.start()
    sock = socket.create_connection(listener.getsockname())
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    listener.close()
    return WIRES[wire](sock, True), sock, child


def commit_call(channel):
    channel.send({"op": "notices", "since": 7})
    channel.receive()


def result_call(channel, data):
    channel.send({"op": "result", "rank": 1, "size": 2, "world": 0, "ok": True})
    channel.send_frame(b"r", data)
    channel.receive()


def compare(wires, call, repeats, blocks=20):
    """{wire: median seconds of call(channel)}, blocks of each wire in turn
    (in a new random order each block)."""
    opened = {w: connect(w) for w in wires}
    samples = {w: [] for w in wires}
    for wire in wires:
        for _ in range(3):
            call(opened[wire][0])
    for _ in range(blocks):
        for wire in random.sample(wires, len(wires)):
            channel = opened[wire][0]
            for _ in range(max(1, repeats // blocks)):
                start = time.perf_counter()
                call(channel)
                samples[wire].append(time.perf_counter() - start)
    for _, sock, child in opened.values():
        sock.close()
        child.join(timeout=10)
    return {w: statistics.median(s) for w, s in samples.items()}


def cpu_per_message(make, repeats=20000):
    """Seconds one thread spends to send and receive a commit request over a
    socket pair: the wire's own cost, without the scheduler's."""
    a, b = socket.socketpair()
    sender, receiver = make(a, True), make(b, False)
    best = None
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(repeats):
            sender.send({"op": "notices", "since": 7})
            receiver.receive()
        took = (time.perf_counter() - start) / repeats
        best = took if best is None else min(best, took)
    a.close()
    b.close()
    return best


def handshake_time(repeats):
    from tf_ring.plumbing.authenticated_server import AuthenticatedServer
    server = AuthenticatedServer("s" * 32, "bench", lambda channel: channel.receive(),
                                 "127.0.0.1", 1 << 16, "bench")
    endpoint = endpoints.format_endpoint(server.service_id, ["127.0.0.1"], server.port)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        handshake.connect(endpoint, "s" * 32, "bench", 1 << 16, 5).close()
        times.append(time.perf_counter() - start)
    server.close()
    return statistics.median(times)


def hmac_time(size, repeats=5):
    """One side's MAC of a `size`-byte frame (a sealed frame costs two: sender, receiver)."""
    import hmac
    data, times = os.urandom(size), []
    for _ in range(repeats):
        start = time.perf_counter()
        hmac.new(KEYS[0], data, "sha256").digest()
        times.append(time.perf_counter() - start)
    return min(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=2000, help="commit calls per wire")
    args = parser.parse_args()
    print("load: %s" % open("/proc/loadavg").read().strip())
    pin(0)
    rows = []
    t = compare(["old lines", "sealed"], commit_call, args.repeats)
    rows.append(("commit (notices round trip)", "%.1f us" % (t["old lines"] * 1e6),
                 "%.1f us" % (t["sealed"] * 1e6), "%.2fx" % (t["sealed"] / t["old lines"])))
    old, new = cpu_per_message(WIRES["old lines"]), cpu_per_message(sealed)
    rows.append(("commit message, CPU only", "%.1f us" % (old * 1e6), "%.1f us" % (new * 1e6),
                 "%.2fx" % (new / old)))
    for size in SIZES:
        data = os.urandom(size)
        repeats = max(5, min(500, (256 << 20) // size))
        t = compare(["old frames", "sealed"], lambda c: result_call(c, data), repeats)
        rows.append(("result %s" % _size(size), _rate(size, t["old frames"]),
                     _rate(size, t["sealed"]), "%.2fx" % (t["sealed"] / t["old frames"])))
    rows.append(("handshake (connect + proof)", "-", "%.2f ms" % (handshake_time(200) * 1e3), "-"))
    rows.append(("HMAC-SHA256 alone, 64 MiB", "-", _rate(64 << 20, hmac_time(64 << 20)), "-"))
    header = ("path", "before (unsealed)", "after (sealed)", "time after/before")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(4)]
    for row in [header, ["-" * w for w in widths]] + rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths)))


def _size(n):
    return "%d KiB" % (n >> 10) if n < 1 << 20 else "%d MiB" % (n >> 20)


def _rate(size, seconds):
    if size < 1 << 20:
        return "%.1f us" % (seconds * 1e6)
    return "%.2f ms (%.0f MB/s)" % (seconds * 1e3, size / seconds / 1e6)


if __name__ == "__main__":
    main()
