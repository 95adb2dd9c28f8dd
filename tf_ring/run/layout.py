"""Which host and local rank each rank gets, for `tfringrun --verbose`.

Mirrors mpirun's default by-slot mapping: ranks fill the first host's slots,
then the next host's; with more ranks than slots (oversubscription) the
mapping wraps around the hosts again in the same order.
"""
from tf_ring.plumbing import host_names


def parse_hosts(hosts):
    """"a:2,b" -> [("a", 2), ("b", 1)]; a name that is no host name is a ValueError."""
    parsed = []
    for item in hosts.split(","):
        name, slots = host_names.split_slots(item.strip())
        if not name or (slots and (not slots.isdigit() or int(slots) < 1)):
            raise ValueError("bad host entry %r: expected HOST or HOST:SLOTS with SLOTS >= 1" % item)
        host_names.check(name, "host entry %r" % item.strip())
        parsed.append((name, int(slots) if slots else 1))
    return parsed


def rank_layout(np, hosts=None, local_slots=1):
    """[(rank, host, local_rank)] for `np` ranks on `hosts` (None: this machine)."""
    host_slots = parse_hosts(hosts) if hosts else [("localhost", max(local_slots, 1))]
    order = []
    while len(order) < np:
        for name, slots in host_slots:
            order += [name] * slots
    layout, seen = [], {}
    for rank, name in enumerate(order[:np]):
        layout.append((rank, name, seen.get(name, 0)))
        seen[name] = seen.get(name, 0) + 1
    return layout


def format_layout(layout):
    """A small aligned table: rank, host, local rank."""
    rows = [("rank", "host", "local rank")] + [(str(r), h, str(l)) for r, h, l in layout]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()
                     for row in rows)
