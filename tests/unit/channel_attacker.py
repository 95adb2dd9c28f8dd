"""An attacker on the job's channels who knows the wire but not the secret
(issue 47). Standard library only, so it runs as another user (`nobody`,
through setpriv) with no access to tf_ring:

    python channel_attacker.py relay TARGET_PORT INJECT_JSON [RESULT_HEX]
        Listens on a loopback port (printed as "PORT n"), where a client
        falls through; relays the client's handshake to the live service on
        TARGET_PORT, then sends the service INJECT_JSON (and a result frame
        of RESULT_HEX) as frames of its own, with the next sequence numbers
        and a MAC under a key made without the secret, and relays on.
        Prints what the service sent back after that ("GOT n bytes", its
        heartbeats left out), then "DONE".
    python channel_attacker.py dribble PORT SECONDS
        Opens a connection and sends a valid frame's header and then one
        byte of its payload every 0.2 s; prints how long the service kept
        the connection open ("HELD s").
    python channel_attacker.py flood PORT COUNT SECONDS
        Opens COUNT connections that never speak, holds them SECONDS, and
        prints how many the service had closed by then ("CLOSED n").

Pre-proof frames: kind (1) | length (4) | payload. Sealed frames: kind |
length | seq (8) | payload | HMAC-SHA256 (32)."""
import hashlib
import hmac
import json
import select
import socket
import struct
import sys
import time

HEAD = struct.Struct(">cI")


def read_exact(sock, count):
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def read_raw_frame(sock):
    """(kind, payload, the frame's bytes) of a pre-proof frame."""
    head = read_exact(sock, HEAD.size)
    kind, length = HEAD.unpack(head)
    payload = read_exact(sock, length)
    return kind, payload, head + payload


def raw_frame(kind, payload):
    return HEAD.pack(kind, len(payload)) + payload


def forged_frame(kind, payload, seq, key):
    head = HEAD.pack(kind, len(payload)) + struct.pack(">Q", seq)
    return head + payload + hmac.new(key, head + payload, hashlib.sha256).digest()


def relay(target_port, inject, result_hex=None):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    print("PORT %d" % listener.getsockname()[1], flush=True)
    client, _ = listener.accept()
    service = socket.create_connection(("127.0.0.1", target_port), timeout=10)
    seen = []
    for source, sink in ((service, client), (client, service), (service, client)):
        try:
            kind, payload, data = read_raw_frame(source)
        except (ConnectionError, OSError) as e:
            print("HANDSHAKE CUT %s" % e, flush=True)
            break
        seen.append(payload)
        sink.sendall(data)
    # The attacker's best guess at a key: everything it saw, but not the secret.
    key = hashlib.sha256(b"".join(seen)).digest()
    frames = [forged_frame(b"j", json.dumps(inject).encode(), 0, key)]
    if result_hex:
        frames.append(forged_frame(b"r", bytes.fromhex(result_hex), 1, key))
    try:
        service.sendall(b"".join(frames))
    except OSError as e:
        print("INJECT FAILED %s" % e, flush=True)
    got = pump(client, service, seconds=3.0)
    print("GOT %d bytes" % got, flush=True)
    print("DONE", flush=True)


def pump(client, service, seconds):
    """Relays both ways for `seconds`; returns the bytes of the frames the
    service sent other than heartbeats (sealed frames of kind b"h")."""
    got, deadline = 0, time.time() + seconds
    open_ends, stream = [client, service], b""
    while time.time() < deadline:
        ready, _, _ = select.select(open_ends, [], [], 0.1)
        for sock in ready:
            try:
                data = sock.recv(65536)
            except OSError:
                data = b""
            if not data:  # one end closed: so does the relay, both ways
                return got
            if sock is service:
                stream += data
                while len(stream) >= HEAD.size:
                    kind, length = HEAD.unpack(stream[:HEAD.size])
                    size = HEAD.size + 8 + length + 32
                    if len(stream) < size:
                        break
                    got += size if kind != b"h" else 0
                    stream = stream[size:]
            try:
                (client if sock is service else service).sendall(data)
            except OSError:
                pass
    return got + len(stream)


def dribble(port, seconds):
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    start = time.time()
    read_raw_frame(sock)  # the service's nonce
    sock.sendall(HEAD.pack(b"j", 200))
    while time.time() - start < seconds:
        try:
            sock.sendall(b" ")
            ready, _, _ = select.select([sock], [], [], 0.2)
            if ready and not sock.recv(1):
                break
        except OSError:
            break
    print("HELD %.2f" % (time.time() - start), flush=True)


def flood(port, count, seconds):
    socks = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(count)]
    time.sleep(seconds)
    closed = 0
    for sock in socks:
        sock.setblocking(False)
        try:
            while True:
                data = sock.recv(65536)
                if not data:
                    closed += 1
                    break
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
    print("CLOSED %d" % closed, flush=True)


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "relay":
        relay(int(args[0]), json.loads(args[1]), args[2] if len(args) > 2 else None)
    elif mode == "dribble":
        dribble(int(args[0]), float(args[1]))
    elif mode == "flood":
        flood(int(args[0]), int(args[1]), float(args[2]))
