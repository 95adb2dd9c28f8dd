"""tf_ring.plumbing's channel floor, in-process: sealed frames refuse a
wrong MAC, a replayed or reordered frame, an oversized or truncated one;
the handshake binds the proof to one service; any parse failure, before or
after the proof and on either side, is a ChannelError (never another
exception); endpoints never send a client to a host-local address of
another host. Issue 58: long messages go in pieces, each checked before the
next is read; heartbeats keep a quiet peer, silence drops a frozen one."""
import hashlib
import hmac
import json
import os
import socket
import struct
import threading
import time

import pytest

from tf_ring.elastic import control_client
from tf_ring.hosted import job
from tf_ring.plumbing import channel_beats, endpoints, handshake
from tf_ring.plumbing.sealed_frames import (BEAT, JSON, MORE, PIECE, ChannelError, PeerClosed,
                                            SealedChannel, parse_json)
from tf_ring.elastic_driver.control_service import ControlService
from tf_ring.spark import barrier_task

NESTED = b"[" * 2000 + b"]" * 2000  # within the pre-proof limit, past the recursion limit


def sealed_pair(limit=1 << 20):
    a, b = socket.socketpair()
    left, right = SealedChannel(a, limit), SealedChannel(b, limit)
    left.seal(b"k1" * 16, b"k2" * 16)
    right.seal(b"k2" * 16, b"k1" * 16)
    return left, right


def test_sealed_frames_arrive_in_order_with_their_kinds():
    left, right = sealed_pair()
    left.send({"op": "x"})
    left.send_frame(b"r", b"\0" * 200000)
    right.send({"back": 1})
    assert right.receive() == {"op": "x"}
    assert right.receive_frame() == (b"r", b"\0" * 200000)
    assert left.receive() == {"back": 1}


def _two_frames():
    """The bytes of the first heartbeat and two sealed frames, {"n": 0} and
    {"n": 1}, as one peer sends them."""
    a, b = socket.socketpair()
    sender = SealedChannel(a, 1 << 20)
    sender.seal(b"k1" * 16, b"k2" * 16)
    sender.send({"n": 0})
    sender.send({"n": 1})
    drained = _drained(b)
    sender.close()
    data = _collect(drained)
    frames = []
    while data:
        size = 5 + 8 + struct.unpack(">cI", data[:5])[1] + 32
        frames.append(data[:size])
        data = data[size:]
    beat, first, second = frames  # a sealed channel's first frame is its heartbeat (seq 0)
    assert beat[:1] == BEAT
    return beat, first, second


def _drained(sock):
    """Everything `sock` receives until its peer closes (read as it comes,
    so a sender of more than a socket's buffer never waits)."""
    got = []

    def read():
        while True:
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            got.append(chunk)
        sock.close()
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return got, reader


def _collect(drained):
    got, reader = drained
    reader.join(30)
    return b"".join(got)


def _delivered(wire):
    """The messages a receiver accepts of `wire`, and how it stopped."""
    feed, sink = socket.socketpair()
    channel = SealedChannel(sink, 1 << 20)
    channel.seal(b"k2" * 16, b"k1" * 16)
    feed.sendall(wire)
    feed.shutdown(socket.SHUT_WR)
    got = []
    try:
        while True:
            got.append(channel.receive())
    except PeerClosed:
        return got, "closed"
    except ChannelError as e:
        return got, str(e)


def test_two_frames_arrive_untouched():
    beat, first, second = _two_frames()
    assert _delivered(beat + first + second) == ([{"n": 0}, {"n": 1}], "closed")


@pytest.mark.parametrize("tamper, refusal", [
    ("payload", "MAC is wrong"), ("mac", "MAC is wrong"), ("replay", "frame 1 where 2"),
    ("reorder", "frame 2 where 1"), ("skip", "frame 2 where 1")])
def test_a_tampered_replayed_or_reordered_frame_is_refused(tamper, refusal):
    beat, first, second = _two_frames()
    wire = beat + {"payload": first.replace(b'"n": 0', b'"n": 9'),
            "mac": first[:-1] + bytes([first[-1] ^ 1]),
            "replay": first + first, "reorder": second + first, "skip": second}[tamper]
    got, stop = _delivered(wire)
    assert got == ([{"n": 0}] if tamper == "replay" else []) and refusal in stop, stop


def test_an_oversized_or_truncated_sealed_frame_is_refused():
    feed, sink = socket.socketpair()
    channel = SealedChannel(sink, 100)
    channel.seal(b"a" * 32, b"b" * 32)
    feed.sendall(struct.pack(">cI", b"j", 101))
    with pytest.raises(ChannelError, match="at most 100"):
        channel.receive_frame()
    feed, sink = socket.socketpair()
    channel = SealedChannel(sink, 100)
    channel.seal(b"a" * 32, b"b" * 32)
    feed.sendall(struct.pack(">cIQ", b"j", 50, 0) + b"{}")
    feed.shutdown(socket.SHUT_WR)  # an end inside the frame: not a clean close
    with pytest.raises(ChannelError, match="truncated") as caught:
        channel.receive_frame()
    assert not isinstance(caught.value, PeerClosed) and caught.value.reason == "truncated"


@pytest.mark.parametrize("payload", [NESTED, b"\xff\xfe", b"[1, 2]", b"{\"a\": 1", b"9" * 5000])
def test_any_parse_failure_is_a_channel_error(payload):
    with pytest.raises(ChannelError):
        parse_json(payload)


def _fake_service(greeting):
    """A listener that sends `greeting` (a pre-proof frame's payload) to the first
    client and then keeps quiet; its port."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def serve():
        conn, _ = listener.accept()
        conn.sendall(struct.pack(">cI", b"j", len(greeting)) + greeting)
        conn.recv(4096)
        conn.close()
        listener.close()
    threading.Thread(target=serve, daemon=True).start()
    return listener.getsockname()[1]


def test_a_fake_service_sending_nested_json_does_not_crash_rank_0(capsys):
    port = _fake_service(NESTED)
    endpoint = endpoints.format_endpoint("0" * 32, ["127.0.0.1"], port)
    client = control_client.from_environment({"TF_RING_CONTROL_TO": endpoint,
                                              "TF_RING_ELASTIC_SECRET": "s"})
    assert client.notices() == []  # no exception reaches the commit
    client.report_commit(1)
    assert "cannot reach tfringrun's control channel" in capsys.readouterr().err


@pytest.mark.parametrize("attempt", [NESTED, b"\xff\xfe not json", b"{\"nonce\": 1}",
                                     json.dumps({"nonce": "ab" * 16, "proof": "\u00e9" * 64})
                                     .encode()])
def test_bad_input_before_the_proof_is_refused_and_the_service_goes_on(attempt):
    errors = []
    hook, threading.excepthook = threading.excepthook, errors.append
    service = ControlService("s3cret", ["127.0.0.1"])
    try:
        with socket.create_connection(("127.0.0.1", service.port), timeout=5) as sock:
            kind, length = struct.unpack(">cI", sock.recv(5))
            assert set(json.loads(sock.recv(length))) == {"nonce"}
            sock.sendall(struct.pack(">cI", b"j", len(attempt)) + attempt)
            assert sock.recv(4096) == b""  # dropped without an answer
        client = control_client.from_environment(dict(service.environment(),
                                                      TF_RING_ELASTIC_SECRET="s3cret"))
        client.report_commit(3)
        client.close()
        assert service.committed == 3 and service.refused == 1 and errors == []
    finally:
        threading.excepthook = hook
        service.close()


def test_nested_json_from_a_proven_peer_is_refused_too():
    service = ControlService("s3cret", ["127.0.0.1"])
    try:
        channel = handshake.connect(service.environment()["TF_RING_CONTROL_TO"], "s3cret",
                                    "control", 1 << 16, 5)
        channel.send_frame(b"j", NESTED)
        with pytest.raises(PeerClosed):
            channel.receive()
        assert service.refused == 1
    finally:
        service.close()


def test_a_proof_for_one_service_fails_at_another():
    one, other = (ControlService("s3cret", ["127.0.0.1"]) for _ in range(2))
    try:
        meant = one.environment()["TF_RING_CONTROL_TO"]
        wrong = "%s:%d" % (meant.rpartition(":")[0], other.port)
        # The service refuses the proof and drops the connection before proving itself.
        with pytest.raises(ChannelError, match="closed"):
            handshake.connect(wrong, "s3cret", "control", 1 << 16, 5)
        with pytest.raises(ChannelError, match="closed"):  # another kind of service, same id
            handshake.connect(meant, "s3cret", "task", 1 << 16, 5)
        assert one.refused == 1 and other.refused == 1
    finally:
        one.close()
        other.close()


def test_session_keys_differ_per_direction_and_connection():
    key = handshake.service_key("s", "control", "id")
    a = handshake._session_keys(key, "11" * 16, "22" * 16)
    b = handshake._session_keys(key, "11" * 16, "33" * 16)
    assert len({a[0], a[1], b[0], b[1]}) == 4
    assert a[0] == hmac.new(key, b"tf_ring session|client->service|" + b"11" * 16 + b"|"
                            + b"22" * 16, hashlib.sha256).digest()


# -- endpoints: no host-local address for another host -------------------------

def test_host_local_addresses_are_published_only_when_there_is_nothing_else():
    assert endpoints.published(["127.0.0.1", "10.0.0.5", "169.254.1.1", "10.0.0.5"]) == \
        ["10.0.0.5"]
    assert endpoints.published(["127.0.0.1"]) == ["127.0.0.1"]


def test_machine_addresses_leave_loopback_out(monkeypatch):
    from tf_ring.plumbing import interface_addresses
    monkeypatch.setattr(interface_addresses, "all_addresses",
                        lambda: {"lo": "127.0.0.1", "eth0": "10.1.2.3"})
    assert job.machine_addresses() == ["10.1.2.3"]
    assert job.machine_addresses("lo") == ["127.0.0.1"]  # asked for: this machine only
    # Spark's executor host name resolving to 127.0.1.1 (Debian's /etc/hosts)
    monkeypatch.setattr(barrier_task.socket, "gethostbyname", lambda name: "127.0.1.1")
    assert barrier_task._service_addresses("exec-host", None) == ["10.1.2.3"]


def test_a_client_never_tries_a_host_local_address_of_another_host():
    def resolve(name, port, *rest):
        table = {"10.0.0.5": "10.0.0.5", "127.0.0.1": "127.0.0.1", "lo-name": "127.0.1.1",
                 "fe80::1": "169.254.0.1"}
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (table[name], port))]
    remote = endpoints.Endpoint("id", "another-host", ["127.0.0.1", "lo-name", "10.0.0.5"], 7)
    tried, skipped = endpoints.routes(remote, resolve)
    assert tried == [("10.0.0.5", 7)] and len(skipped) == 2
    assert all("host-local" in why for why in skipped)
    here = remote._replace(host_key=endpoints.host_key())
    assert endpoints.routes(here, resolve)[0] == [("127.0.0.1", 7), ("127.0.1.1", 7),
                                                  ("10.0.0.5", 7)]


def test_nothing_listening_on_loopback_hears_a_client_of_another_host():
    trap = socket.socket()
    trap.bind(("127.0.0.1", 0))
    trap.listen(1)
    trap.settimeout(0.5)
    try:
        endpoint = "%s.%s@127.0.0.1:%d" % ("0" * 32, "f" * 16, trap.getsockname()[1])
        with pytest.raises(ChannelError, match="host-local"):
            handshake.connect(endpoint, "s", "function", 1 << 16, 5)
        with pytest.raises(socket.timeout):
            trap.accept()
    finally:
        trap.close()


def test_an_endpoint_round_trips_and_garbage_is_named():
    text = endpoints.format_endpoint("ab" * 16, ["10.0.0.1", "10.0.0.2"], 4242)
    parsed = endpoints.parse_endpoint(text)
    assert parsed.addresses == ["10.0.0.1", "10.0.0.2"] and parsed.port == 4242
    assert parsed.host_key == endpoints.host_key()
    for bad in ("10.0.0.1:5", "x.y@:5", "x.y@10.0.0.1:0", "x.y@10.0.0.1:port"):
        with pytest.raises(ValueError, match="not a tf_ring service endpoint"):
            endpoints.parse_endpoint(bad)


# -- issue 58: pieces, heartbeats, silence -------------------------------------

def _wire_frames(data):
    """[(kind, length)] of the sealed frames in `data`, heartbeats left out."""
    found = []
    while data:
        kind, length = struct.unpack(">cI", data[:5])
        data = data[5 + 8 + length + 32:]
        if kind != BEAT:
            found.append((kind, length))
    return found


def test_a_long_message_goes_in_pieces_each_with_its_mac():
    a, b = socket.socketpair()
    sender = SealedChannel(a, 1 << 23)
    sender.seal(b"k1" * 16, b"k2" * 16)
    payload = os.urandom(3 * PIECE + 5)
    drained = _drained(b)
    sender.send_frame(b"r", payload)
    sender.send({"after": 1})
    sender.close()
    data = _collect(drained)
    assert _wire_frames(data) == [(MORE, PIECE)] * 3 + [(b"r", 5), (JSON, 12)]
    feed, sink = socket.socketpair()
    receiver = SealedChannel(sink, 1 << 23)
    receiver.seal(b"k2" * 16, b"k1" * 16)
    threading.Thread(target=lambda: (feed.sendall(data), feed.shutdown(socket.SHUT_WR)),
                     daemon=True).start()
    assert receiver.receive_frame() == (b"r", payload)
    assert receiver.receive() == {"after": 1}
    with pytest.raises(PeerClosed):
        receiver.receive()


def test_a_message_over_the_limit_is_refused_piece_by_piece():
    left, right = sealed_pair(limit=PIECE + 10)
    sending = threading.Thread(target=lambda: _quietly(left.send_frame, b"r", b"x" * 3 * PIECE),
                               daemon=True)
    sending.start()
    with pytest.raises(ChannelError, match="more than") as caught:
        right.receive_frame()
    assert caught.value.reason == "oversized"
    sending.join(10)
    assert not sending.is_alive()  # the refusal ended the connection: the sender is not stuck


def _quietly(fn, *args):
    try:
        fn(*args)
    except OSError:
        pass


def test_an_announced_length_over_a_piece_is_refused_before_any_of_it_is_read():
    feed, sink = socket.socketpair()
    channel = SealedChannel(sink, 1 << 31)
    channel.seal(b"a" * 32, b"b" * 32)
    feed.sendall(struct.pack(">cI", b"r", PIECE + 1))  # and nothing more
    with pytest.raises(ChannelError, match="at most %d" % PIECE):
        channel.receive_frame()


def test_heartbeats_and_the_peers_interval(monkeypatch):
    a, b = socket.socketpair()
    slow, quick = SealedChannel(a, 100), SealedChannel(b, 100)
    monkeypatch.setenv(channel_beats.TIMEOUT_ENV, "6")
    slow.seal(b"k1" * 16, b"k2" * 16)
    monkeypatch.setenv(channel_beats.TIMEOUT_ENV, "0.6")
    quick.seal(b"k2" * 16, b"k1" * 16)
    # Each side waits for the longer of its own timeout and three of the peer's beats.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and quick.allowed_silence() != 6.0:
        time.sleep(0.01)
    assert quick.allowed_silence() == 6.0 and slow.allowed_silence() == 6.0
    time.sleep(1.0)  # quiet, and beating: nothing to receive, nothing dropped
    assert not quick.dropped and not slow.dropped
    quick.send({"still": "here"})
    assert slow.receive() == {"still": "here"}
    slow.close()
    quick.close()


def test_a_peer_that_never_beats_is_dropped_at_the_timeout(monkeypatch):
    monkeypatch.setenv(channel_beats.TIMEOUT_ENV, "0.5")
    silent, sink = socket.socketpair()  # `silent` proved the secret, then says nothing
    failures = []
    channel = SealedChannel(sink, 100, failures.append)
    channel.seal(b"a" * 32, b"b" * 32)
    start = time.monotonic()
    with pytest.raises(ChannelError, match="nothing from the peer") as caught:
        channel.receive_frame()
    assert 0.45 <= time.monotonic() - start < 3.0
    assert caught.value.reason == "silent" and channel.reported and len(failures) == 1
    silent.settimeout(5)
    while silent.recv(1 << 16):  # its beats, then the end: the connection is shut down
        pass


@pytest.mark.parametrize("value", ["abc", "0", "-1", "nan", "1e9"])
def test_a_bad_channel_timeout_is_named(value):
    with pytest.raises(ValueError, match="TF_RING_CHANNEL_TIMEOUT_S=%r" % value):
        channel_beats.timeout_s({channel_beats.TIMEOUT_ENV: value})
    assert channel_beats.timeout_s({}) == 30.0
    assert channel_beats.timeout_s({channel_beats.TIMEOUT_ENV: " 2.5 "}) == 2.5
