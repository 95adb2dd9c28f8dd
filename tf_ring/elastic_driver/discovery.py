"""Host discovery for elastic runs: runs the user's script and parses what
it prints, and keeps the blacklist of hosts that lost ranks.

The script prints one host per line, `host` (one slot, or --slots-per-host)
or `host:slots`. Blank lines and `#` comments are skipped. A script that
fails or prints a bad line is an error naming the script and the line, since
a silently empty answer would look like every host leaving."""
import random
import subprocess
import time

from tf_ring.plumbing import host_names


class DiscoveryError(RuntimeError):
    """The discovery script failed or printed something unparsable."""


def parse_hosts(text, default_slots=1, script="the discovery script"):
    """[(host, slots)] from the script's output, in the order printed (the
    driver keeps that order, so survivors can be listed first)."""
    hosts, seen = [], set()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, slots = host_names.split_slots(line)
        name = name.strip()
        if not name or any(c.isspace() for c in name) or (slots and not slots.strip().isdigit()) \
                or line.endswith(":"):
            raise DiscoveryError(
                "%s printed %r on line %d; each line must be `host` or `host:slots` "
                "with a positive whole number of slots" % (script, raw, number))
        if not host_names.is_valid(name):  # it reaches ssh and mpirun's --host list
            raise DiscoveryError("%s printed %r on line %d: %r is not a host name: %s"
                                 % (script, raw, number, name, host_names.RULE))
        count = int(slots) if slots else default_slots
        if count < 1:
            raise DiscoveryError("%s gave host %s %d slots on line %d; slots must be >= 1"
                                 % (script, name, count, number))
        if name in seen:
            raise DiscoveryError("%s listed host %s twice (line %d); list each host once"
                                 % (script, name, number))
        seen.add(name)
        hosts.append((name, count))
    return hosts


def run_discovery(script, default_slots=1, timeout=30):
    """Runs `script` (through the shell, as Horovod does) and parses it."""
    try:
        done = subprocess.run(script, shell=True, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise DiscoveryError("discovery script %r did not finish within %ds" % (script, timeout))
    if done.returncode != 0:
        raise DiscoveryError("discovery script %r exited %d: %s" % (
            script, done.returncode, done.stderr.strip()[-500:] or "(no stderr)"))
    return parse_hosts(done.stdout, default_slots, "discovery script %r" % script)


class Blacklist:
    """Hosts that lost ranks, each kept out for a cooldown. Without a
    cooldown range a host stays out for the rest of the job (Horovod's
    default); with one it returns after a random time in [low, high] seconds,
    doubling on each repeat failure, so a flaky host backs off."""

    def __init__(self, cooldown_range=None, clock=time.monotonic, rand=random.uniform):
        if cooldown_range is not None:
            low, high = cooldown_range
            if not 0 <= low <= high:
                raise ValueError("--blacklist-cooldown-range needs 0 <= MIN <= MAX, got %s %s"
                                 % (low, high))
        self._range, self._clock, self._rand = cooldown_range, clock, rand
        self._until, self._strikes = {}, {}

    def add(self, host):
        strikes = self._strikes.get(host, 0) + 1
        self._strikes[host] = strikes
        if self._range is None:
            self._until[host] = float("inf")
        else:
            self._until[host] = self._clock() + self._rand(*self._range) * 2 ** (strikes - 1)

    def blocked(self, host):
        return self._clock() < self._until.get(host, float("-inf"))

    def usable(self, hosts):
        """`hosts` ([(host, slots)]) without the blocked ones, order kept."""
        return [(h, s) for h, s in hosts if not self.blocked(h)]
