"""The elastic driver's decisions that need no processes: which hosts the
next world runs on and how many ranks, and what a rank's exit means.

Kept apart from the loop that runs mpirun so each rule is unit-tested."""

# A rank exits with this after HostsUpdatedInterrupt and saving its commit,
# asking the driver to relaunch at the new size (not a failure).
EXIT_HOSTS_UPDATED = 75


class BelowMinimum(Exception):
    """Fewer usable slots than --min-np."""


def plan_world(discovered, blacklist, min_np, max_np, survivors=()):
    """(hosts, np) for the next launch. `discovered` is [(host, slots)] in
    discovery order; blacklisted hosts are dropped; hosts in `survivors`
    (those that ran the last world) come first, so rank 0 of the new world is
    on a host that holds the in-memory mirror of the last commit.
    np = min(max_np, usable slots); BelowMinimum if that is under min_np."""
    usable = blacklist.usable(discovered)
    kept = set(survivors)
    ordered = [h for h in usable if h[0] in kept] + [h for h in usable if h[0] not in kept]
    slots = sum(s for _, s in ordered)
    np = slots if max_np is None else min(max_np, slots)
    if np < min_np:
        raise BelowMinimum("%d usable slots on %s; --min-np needs at least %d"
                           % (slots, ", ".join(h for h, _ in ordered) or "no hosts", min_np))
    # Trim hosts the ranks do not reach, so mpirun is not asked to visit them.
    chosen, left = [], np
    for host, s in ordered:
        if left <= 0:
            break
        chosen.append((host, min(s, left)))
        left -= min(s, left)
    return chosen, np


def hosts_argument(chosen):
    """The -H value mpirun gets for `chosen`."""
    return ",".join("%s:%d" % (h, s) for h, s in chosen)


def added_slots(previous, discovered, blacklist):
    """True when discovery now offers a usable host or slot the running world
    does not have (the driver then notices rank 0)."""
    before = dict(previous)
    return any(s > before.get(h, 0) for h, s in blacklist.usable(discovered))
