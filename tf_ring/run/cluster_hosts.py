"""Where a job's hosts come from: -H, a host file, a Slurm allocation, or
the Kubeflow MPI Operator's host file (mpi_operator).

Every source ends as the same list of (host, slots), which the launcher
validates once and hands to mpirun as one --host list, so the layout table,
the slot check and mpirun always agree.
"""
import itertools
import os
import re

from tf_ring.plumbing import host_names
from tf_ring.run import layout, mpi_operator


class HostsError(ValueError):
    """A host list that cannot be used; the message says what to fix."""


def read_hostfile(path):
    """Parses `host [slots=N]` lines ('#' comments and blank lines allowed)."""
    if not os.path.isfile(path):
        raise HostsError("host file %r does not exist" % path)
    hosts = []
    with open(path) as f:
        for number, raw in enumerate(f, 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            name, *options = line.split()
            slots = 1
            for option in options:
                key, _, value = option.partition("=")
                if key != "slots" or not value.isdigit() or int(value) < 1:
                    raise HostsError("%s line %d: %r: expected 'HOST' or 'HOST slots=N' with N >= 1"
                                     % (path, number, raw.strip()))
                slots = int(value)
            try:
                host_names.check(name, "%s line %d" % (path, number))
            except ValueError as e:
                raise HostsError(str(e))
            hosts.append((name, slots))
    if not hosts:
        raise HostsError("host file %r names no hosts" % path)
    return hosts


def _split_top_level(text):
    """Splits on commas outside brackets: "a[1,3],b" -> ["a[1,3]", "b"]."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _expand_range_list(body, nodelist):
    """"01-03,07" -> ["01", "02", "03", "07"]; zero padding of the start is kept."""
    values = []
    for piece in body.split(","):
        first, sep, last = piece.partition("-")
        if not first.isdigit() or (sep and not last.isdigit()):
            raise HostsError("SLURM_JOB_NODELIST %r: bad range %r" % (nodelist, piece))
        if not sep:
            values.append(first)
            continue
        if int(last) < int(first):
            raise HostsError("SLURM_JOB_NODELIST %r: range %r runs backwards" % (nodelist, piece))
        values += [str(n).zfill(len(first)) for n in range(int(first), int(last) + 1)]
    return values


def expand_nodelist(nodelist):
    """Slurm's compressed host list, e.g. "node[01-03,07],gpu5" or
    "rack[1-2]-n[1-2]", -> every host name in order."""
    hosts = []
    for item in _split_top_level(nodelist.strip()):
        if not item:
            raise HostsError("SLURM_JOB_NODELIST %r has an empty entry" % nodelist)
        # Alternating literal text and [ranges]; each range multiplies.
        pieces = re.split(r"\[([^\]]*)\]", item)
        if "[" in "".join(pieces[::2]) or "]" in "".join(pieces[::2]):
            raise HostsError("SLURM_JOB_NODELIST %r: unbalanced brackets in %r" % (nodelist, item))
        choices = [[p] if i % 2 == 0 else _expand_range_list(p, nodelist)
                   for i, p in enumerate(pieces)]
        hosts += ["".join(combo) for combo in itertools.product(*choices)]
    for host in hosts:
        try:
            host_names.check(host, "SLURM_JOB_NODELIST %r" % nodelist)
        except ValueError as e:
            raise HostsError(str(e))
    return hosts


def expand_tasks_per_node(tasks):
    """Slurm's "2(x3),1" -> [2, 2, 2, 1]."""
    counts = []
    for item in tasks.strip().split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", item.strip())
        if not match or int(match.group(1)) < 1:
            raise HostsError("SLURM_TASKS_PER_NODE %r: bad entry %r (expected N or N(xR))"
                             % (tasks, item))
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def slurm_hosts(environ):
    """(host, slots) for this Slurm allocation, or None outside one."""
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    if not nodelist:
        return None
    names = expand_nodelist(nodelist)
    tasks = environ.get("SLURM_TASKS_PER_NODE")
    counts = expand_tasks_per_node(tasks) if tasks else [1] * len(names)
    if len(counts) != len(names):
        raise HostsError("SLURM_TASKS_PER_NODE %r gives %d nodes but SLURM_JOB_NODELIST %r has %d"
                         % (tasks, len(counts), nodelist, len(names)))
    return list(zip(names, counts))


def operator_hosts(environ):
    """(hosts, source) from the MPI Operator's host file, or (None, None)
    outside an MPIJob's launcher pod."""
    path, why = mpi_operator.hostfile(environ)
    if path is None:
        return None, None
    try:
        return read_hostfile(path), "MPI Operator host file %s (%s)" % (path, why)
    except HostsError as e:
        raise HostsError("%s (the MPI Operator's host file, from %s)" % (e, why))


def resolve(hosts_flag, hostfile, environ):
    """(hosts, source) from the flags, or from Slurm, or from the MPI
    Operator's host file, when neither flag is given; (None, None) means
    this machine only."""
    if hosts_flag and hostfile:
        raise HostsError("give either -H or --hostfile, not both")
    if hosts_flag:
        try:
            return layout.parse_hosts(hosts_flag), "-H"
        except ValueError as e:
            raise HostsError("-H: %s" % e)
    if hostfile:
        return read_hostfile(hostfile), "--hostfile %s" % hostfile
    found = slurm_hosts(environ)
    if found:
        return found, "Slurm allocation (SLURM_JOB_NODELIST)"
    return operator_hosts(environ)
