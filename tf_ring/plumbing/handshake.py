"""The proof of the job's secret that starts every connection to a service
of the job (the elastic control service, a hosted job's task and function
services), and the keys that seal every frame after it (sealed_frames).

The service sends a fresh nonce; the client answers with its own nonce and
HMAC(K, "client", both nonces); the service proves itself the same way in
return. K = HMAC(secret, "tf_ring service" | label | service id): the
client takes the service id from the endpoint it was given, so a proof
meant for one service (relayed by a listener where the client fell
through) fails at every other. Both sides then seal the channel with
per-direction keys HMAC(K, "tf_ring session" | direction | both nonces):
nothing the relay sends after the handshake is accepted. One deadline
covers the whole handshake; anything unexpected before the proof holds is
a ChannelError, and nothing is acted on. Standard library only."""
import hashlib
import hmac
import os
import socket

from tf_ring.plumbing import endpoints
from tf_ring.plumbing.sealed_frames import ChannelError, SealedChannel

HANDSHAKE_TIMEOUT_S = 5.0  # for the whole handshake, however the peer dribbles
_NONCE_HEX, _PROOF_HEX = 32, 64


def service_key(secret, label, service_id):
    return hmac.new(secret.encode(), b"|".join([b"tf_ring service", label.encode(),
                                                service_id.encode()]), hashlib.sha256).digest()


def _proof(key, role, first, second):
    return hmac.new(key, b"|".join([b"tf_ring proof", role, first.encode(), second.encode()]),
                    hashlib.sha256).hexdigest()


def _session_keys(key, client_nonce, server_nonce):
    """(client to service, service to client)."""
    return tuple(hmac.new(key, b"|".join([b"tf_ring session", direction, client_nonce.encode(),
                                          server_nonce.encode()]), hashlib.sha256).digest()
                 for direction in (b"client->service", b"service->client"))


def _hex_field(message, name, length):
    value = message.get(name)
    if not (isinstance(value, str) and len(value) == length
            and all(c in "0123456789abcdef" for c in value)):
        raise ChannelError("no valid %r in the handshake" % name, "handshake")
    return value


def serve(sock, secret, label, service_id, limit, on_failure=None):
    """The service's side of a new connection: a sealed channel once the
    client proved the secret for this service, else ChannelError/OSError.
    `on_failure`: the channel's (sealed_frames.SealedChannel)."""
    channel = SealedChannel(sock, limit, on_failure)
    channel.start_deadline(HANDSHAKE_TIMEOUT_S)
    key = service_key(secret, label, service_id)
    mine = os.urandom(16).hex()
    channel.send({"nonce": mine})
    reply = channel.receive()
    theirs, proof = _hex_field(reply, "nonce", _NONCE_HEX), _hex_field(reply, "proof", _PROOF_HEX)
    if not hmac.compare_digest(proof, _proof(key, b"client", mine, theirs)):
        raise ChannelError("wrong proof of the job's secret for this %s service" % label,
                           "handshake")
    channel.send({"proof": _proof(key, b"service", theirs, mine)})
    to_service, to_client = _session_keys(key, theirs, mine)
    channel.seal(to_client, to_service)
    return channel


def join(sock, secret, label, service_id, limit):
    """The client's side: a sealed channel once the service proved the secret."""
    channel = SealedChannel(sock, limit)
    channel.start_deadline(HANDSHAKE_TIMEOUT_S)
    key = service_key(secret, label, service_id)
    theirs = _hex_field(channel.receive(), "nonce", _NONCE_HEX)
    mine = os.urandom(16).hex()
    channel.send({"nonce": mine, "proof": _proof(key, b"client", theirs, mine)})
    proof = _hex_field(channel.receive(), "proof", _PROOF_HEX)
    if not hmac.compare_digest(proof, _proof(key, b"service", mine, theirs)):
        raise ChannelError("the %s service's proof of the job's secret is wrong" % label,
                           "handshake")
    to_service, to_client = _session_keys(key, mine, theirs)
    channel.seal(to_service, to_client)
    return channel


def connect(endpoint, secret, label, limit, timeout):
    """A sealed channel to the `label` service at `endpoint` (its text), on
    the first address that answers and proves the secret; ChannelError
    naming every address's failure otherwise."""
    try:
        where = endpoints.parse_endpoint(endpoint)
    except ValueError as e:
        raise ChannelError(str(e))
    targets, problems = endpoints.routes(where)
    for address, port in targets:
        try:
            sock = socket.create_connection((address, port), timeout=timeout)
        except OSError as e:
            problems.append("%s:%d: %s" % (address, port, e))
            continue
        try:
            return join(sock, secret, label, where.service_id, limit)
        except (OSError, ChannelError) as e:
            sock.close()
            problems.append("%s:%d: %s" % (address, port, e))
    raise ChannelError("; ".join(problems) or "no address to connect to")
