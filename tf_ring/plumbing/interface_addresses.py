"""This machine's IPv4 addresses on the network a job uses
(--network-interface), for the listeners tfringrun itself opens.

--network-interface takes what Open MPI's *_if_include take: interface
names (eth1) or subnets (10.0.0.0/24), comma-separated. The heartbeat
listener binds to the matching addresses only, so machines on the other
networks cannot reach it at all.
"""
import fcntl
import ipaddress
import socket
import struct
import sys

_SIOCGIFADDR = 0x8915


def address_of(interface):
    """The IPv4 address of `interface`, or None (no such interface, or none set)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            packed = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR,
                                 struct.pack("256s", interface.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def all_addresses():
    """{interface: IPv4 address} of every interface that has one."""
    found = {}
    for _, name in socket.if_nameindex():
        address = address_of(name)
        if address is not None:
            found[name] = address
    return found


def local_addresses():
    """This machine's IPv4 addresses, loopback last: where other hosts try to
    reach a listener bound to every address (they try each in turn)."""
    found = list(dict.fromkeys(all_addresses().values()))
    return sorted(found, key=lambda a: a.startswith("127."))


def addresses_for(spec, interfaces=None):
    """The addresses `spec` (--network-interface's value) selects here, in
    the order given; [] when none of its names or subnets is on this machine."""
    interfaces = all_addresses() if interfaces is None else interfaces
    chosen = []
    for item in filter(None, (part.strip() for part in spec.split(","))):
        if "/" in item:
            try:
                subnet = ipaddress.ip_network(item, strict=False)
            except ValueError:
                continue  # Open MPI says what is wrong with it
            matches = [a for a in interfaces.values() if ipaddress.ip_address(a) in subnet]
        else:
            matches = [interfaces[item]] if item in interfaces else []
        chosen += [a for a in matches if a not in chosen]
    return chosen


def for_listeners(spec, out=None):
    """Where tfringrun's own listeners bind: the addresses of --network-interface
    (`spec`), or None (every address) without it, or when none of it is on
    this machine (the launcher may sit on another network than the hosts'
    data network; the ranks then still reach it), which is said on `out`."""
    if not spec:
        return None
    chosen = addresses_for(spec)
    if not chosen:
        print("tfringrun: --network-interface %s names no address of this machine; the "
              "heartbeat listener listens on every address" % spec, file=out or sys.stderr)
    return chosen or None
