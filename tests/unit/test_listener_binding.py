"""The launcher's UDP heartbeat listener listens only on the addresses of
the network the job uses (--network-interface, a name or a subnet), so
machines on other networks cannot reach it; without the flag it listens on
every address, as before. A job on one interface:
tests/launcher/test_heartbeat_jobs.py."""
import socket
import time

from tf_ring.run import beats
from tf_ring.plumbing import env_names, interface_addresses

FAKE = {"lo": "127.0.0.1", "eth0": "10.1.2.3", "ib0": "10.9.0.7", "docker0": "172.17.0.1"}


def test_names_subnets_and_lists_select_addresses():
    assert interface_addresses.addresses_for("ib0", FAKE) == ["10.9.0.7"]
    assert interface_addresses.addresses_for("10.0.0.0/8", FAKE) == ["10.1.2.3", "10.9.0.7"]
    assert interface_addresses.addresses_for("10.9.0.0/16,eth0,ib0", FAKE) == ["10.9.0.7",
                                                                               "10.1.2.3"]
    assert interface_addresses.addresses_for("eth7,192.168.0.0/16,not-a/cidr", FAKE) == []


def test_without_the_flag_or_a_match_every_address_is_used(capsys):
    assert interface_addresses.for_listeners(None) is None
    assert interface_addresses.for_listeners("no-such-if0") is None
    assert "names no address of this machine" in capsys.readouterr().err
    assert interface_addresses.for_listeners("lo") == ["127.0.0.1"]


def other_address():
    """A non-loopback IPv4 address of this machine, or None."""
    return next((a for a in interface_addresses.local_addresses() if not a.startswith("127.")), None)


def beat_to(listener, address, seq):
    port = int(listener.environment()[env_names.BEAT_TO].rpartition(":")[2])
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendto(beats.sign(listener.secret, [listener.token, "0", "s", str(seq)]),
                    (address, port))


def heard_after(heard, count, timeout=5.0):
    deadline = time.time() + timeout
    while time.time() < deadline and len(heard) < count:
        time.sleep(0.02)
    return len(heard) >= count


def test_a_bound_listener_hears_its_addresses_only():
    heard = []
    listener = beats.Listener("tok", heard.append, addresses=["127.0.0.1"])
    try:
        assert listener.environment()[env_names.BEAT_TO].startswith("127.0.0.1:")
        beat_to(listener, "127.0.0.1", 0)
        assert heard_after(heard, 1)
        other = other_address()
        if other:  # the same port on another address of this machine: nobody listens
            beat_to(listener, other, 1)
            assert not heard_after(heard, 2, timeout=0.5)
    finally:
        listener.close()


def test_several_addresses_share_one_port():
    other = other_address()
    addresses = ["127.0.0.1"] + ([other] if other else [])
    heard = []
    listener = beats.Listener("tok", heard.append, addresses=addresses)
    try:
        targets = listener.environment()[env_names.BEAT_TO]
        assert targets.rpartition(":")[0] == ",".join(addresses)
        for seq, address in enumerate(addresses):
            beat_to(listener, address, seq)
        assert heard_after(heard, len(addresses))
    finally:
        listener.close()

