"""Which host names tfringrun accepts, from -H, host files, Slurm, the MPI
Operator's host file and discovery scripts.

A host name ends up as an argument of ssh (or the --rsh-agent) and inside
mpirun's comma-separated --host list. A name starting with '-' would be
read as an option (`-oProxyCommand=...` runs a command), and one holding a
',' or ':' would add hosts or slots nobody listed. So only letters, digits,
'.', '_' and '-' are accepted, not starting with '-', or an IPv6 address in
brackets ("[fe80::1]", with an optional "%zone").
"""
import re

_NAME = re.compile(r"[A-Za-z0-9._][A-Za-z0-9._-]*\Z")
_BRACKETED_IPV6 = re.compile(r"\[[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*(%[A-Za-z0-9._-]+)?\]\Z")

RULE = ("a host name may hold letters, digits, '.', '_' and '-', not start with '-' "
        "(an IPv6 address goes in brackets, e.g. [fe80::1])")


def is_valid(name):
    return bool(_NAME.match(name) or _BRACKETED_IPV6.match(name))


def check(name, where):
    """`name` if valid; otherwise ValueError naming `where` (the source and line)."""
    if not is_valid(name):
        raise ValueError("%s: %r is not a host name: %s" % (where, name, RULE))
    return name


def split_slots(item):
    """"host:4" -> ("host", "4"), "[fe80::1]:2" -> ("[fe80::1]", "2"),
    "host" -> ("host", ""): the ':' inside an IPv6 address is not a slot count."""
    if item.startswith("["):
        close = item.find("]")
        if close != -1:
            rest = item[close + 1:]
            if rest.startswith(":"):
                return item[:close + 1], rest[1:]
            if not rest:
                return item, ""
    name, _, slots = item.partition(":")
    return name, slots


def hosts_argument(hosts):
    """[("a", 2), ("b", 1)] -> "a:2,b:1": mpirun's --host form (and -H's)."""
    return ",".join("%s:%d" % (name, slots) for name, slots in hosts)
