"""Where a service of the job is, and which of its addresses a client may
use: an endpoint is "SERVICE_ID.HOST_KEY@addr,addr,...:port".

SERVICE_ID is random per service: the handshake mixes it into the proofs
and the session keys, so a proof meant for one service is refused by every
other (tf_ring.plumbing.handshake). HOST_KEY names the machine (its boot and
network namespace) the service runs on. A host-local address (loopback,
link-local, unspecified) reaches whoever listens on the *client's* machine,
perhaps another user, so a client tries one only when its own HOST_KEY is
the service's: the two really share that loopback. Names are resolved by
the client, and a name that resolves to a host-local address counts as one.
Standard library only: the launcher imports it without TensorFlow."""
import collections
import hashlib
import ipaddress
import os
import socket

Endpoint = collections.namedtuple("Endpoint", "service_id host_key addresses port")
_host_key = None


def is_host_local(address):
    """True for an address only this machine (or a peer on its link) reaches."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False  # a name: see routes()
    return ip.is_loopback or ip.is_link_local or ip.is_unspecified


def host_key():
    """This machine's identity as a loopback sees it: its kernel's boot id
    and its network namespace (containers and simulated hosts on one kernel
    each have their own loopback)."""
    global _host_key
    if _host_key is None:
        parts = []
        for path in ("/proc/sys/kernel/random/boot_id", "/proc/self/ns/net"):
            try:
                parts.append(open(path).read().strip() if "random" in path
                             else str(os.stat(path).st_ino))
            except OSError:
                parts.append(socket.gethostname())
        _host_key = hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]
    return _host_key


def published(addresses):
    """What a service offers of `addresses` (its machine's, best first):
    every address other hosts can reach, and host-local ones only when
    there is nothing else (a machine without a network: one host's job)."""
    addresses = list(dict.fromkeys(addresses))
    reachable = [a for a in addresses if not is_host_local(a)]
    return reachable or addresses


def new_service_id():
    return os.urandom(16).hex()


def format_endpoint(service_id, addresses, port, key=None):
    return "%s.%s@%s:%d" % (service_id, key or host_key(), ",".join(addresses), port)


def parse_endpoint(text):
    """An Endpoint from format_endpoint's text; ValueError naming what is wrong."""
    ident, at, rest = str(text).partition("@")
    service_id, _, key = ident.partition(".")
    addresses, _, port = rest.rpartition(":")
    if not (at and service_id and key and addresses and port.isdigit()
            and 0 < int(port) < 65536):
        raise ValueError("%r is not a tf_ring service endpoint "
                         "(SERVICE_ID.HOST_KEY@addr,...:port)" % (text,))
    return Endpoint(service_id, key, [a for a in addresses.split(",") if a], int(port))


def routes(endpoint, resolve=socket.getaddrinfo):
    """([(ip, port)] a client here may try, in order; [why each other
    address is not tried]). Names are resolved here, IPv4 only."""
    same_host = endpoint.host_key == host_key()
    tried, skipped = [], []
    for address in endpoint.addresses:
        try:
            ips = list(dict.fromkeys(info[4][0] for info in resolve(
                address, endpoint.port, socket.AF_INET, socket.SOCK_STREAM)))
        except (OSError, UnicodeError) as e:
            skipped.append("%s: %s" % (address, e))
            continue
        if any(is_host_local(ip) for ip in ips) and not same_host:
            skipped.append("%s:%d: a host-local address (%s) of another host, not tried: it "
                           "would reach whoever listens on this machine"
                           % (address, endpoint.port, ",".join(ips)))
            continue
        tried += [(ip, endpoint.port) for ip in ips if (ip, endpoint.port) not in tried]
    return tried, skipped
