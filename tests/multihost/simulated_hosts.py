"""Simulated hosts: several "machines" on this one, for multi-host tests and benchmarks.

Each host is a network namespace plus a persistent UTS namespace with its own
hostname, joined by a veth pair to a bridge in the root namespace, and a
persistent mount namespace with its own tmpfs on /dev/shm and /tmp, as a real
host (or a Kubernetes pod) has: state one host writes there is not seen by
another or by the launcher's machine. Open MPI then sees separate nodes
(local_size and cross_size come out right) and talks TCP between them; ranks
on one host still share memory. mpirun itself stays in the root namespace
(on none of the hosts, as on a login node) and reaches the hosts through an
rsh agent script that enters a host's namespaces instead of logging in over
SSH.

What a real cluster shares through its network file system stays visible on
every host: the Python environment, the repository and any path in
SHARED_PATHS (the tests add pytest's temporary directory), each bound back
into the private /tmp where it lives under it.

    with SimulatedHosts(2, rate="2gbit") as hosts:
        subprocess.run(["tfringrun"] + hosts.launcher_args(2) + ["python", "train.py"])

Everything is named tfrs<token>...; the token holds the creating process's
id, so a later run removes what a crashed run left behind while leaving a
concurrent run's hosts alone. Needs root, `ip`, `nsenter` and `unshare`;
`tc` (tbf) for a shaped link. Free of pytest so benchmarks can import it.
"""
import fcntl
import ipaddress
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import time

NAME_PREFIX = "tfrs"
STATE_ROOT = "/run/tf_ring_simhosts"
_LOCK_FILE = STATE_ROOT + ".lock"
# Candidate subnets: 10.213.X.0/24, the first X no route of this machine uses.
_SUBNET_BASE = "10.213.%d.0/24"
_instances = itertools.count()
_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Paths every host sees as the launcher's machine does (a cluster's shared
# file system); callers may append. The environment and the repository are
# always among them.
SHARED_PATHS = []
_PRIVATE_MOUNTS = ("/dev/shm", "/tmp")


def _run(argv, check=True):
    result = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and result.returncode != 0:
        raise RuntimeError("simulated hosts: %s failed (exit %d): %s"
                           % (" ".join(argv), result.returncode, result.stderr.strip()))
    return result


def namespaces_available():
    """(True, "") if this process can make simulated hosts, else (False, why)."""
    if os.geteuid() != 0:
        return False, "simulated hosts need root (network and UTS namespaces)"
    for tool in ("ip", "nsenter", "unshare"):
        if shutil.which(tool) is None:
            return False, "simulated hosts need the '%s' tool, which is not installed" % tool
    probe = "%sprobe%d" % (NAME_PREFIX, os.getpid())
    made = _run(["ip", "netns", "add", probe], check=False)
    if made.returncode != 0:
        return False, "cannot make a network namespace: %s" % made.stderr.strip()
    _run(["ip", "netns", "delete", probe], check=False)
    return True, ""


def _start_time(pid):
    """The kernel's start time of `pid` (survives pid reuse checks), or None if gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _token_owner_alive(token):
    """Whether the process that made `token`'s hosts still runs."""
    record = os.path.join(STATE_ROOT, token, "owner")
    try:
        with open(record) as f:
            pid, started = f.read().split()
    except (OSError, ValueError):
        return False
    return _start_time(int(pid)) == started


def _netns_pids(netns):
    out = _run(["ip", "netns", "pids", netns], check=False).stdout
    return [int(p) for p in out.split()]


def _kill_all_in(netns, timeout=10.0):
    """SIGKILLs every process in `netns` until none is left (or `timeout`)."""
    deadline = time.time() + timeout
    while True:
        pids = _netns_pids(netns)
        if not pids or time.time() > deadline:
            return pids
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def _remove_token(token):
    """Removes every namespace, link and file named after `token`."""
    netns_names = [line.split()[0] for line in
                   _run(["ip", "netns", "list"], check=False).stdout.splitlines() if line.strip()]
    for netns in netns_names:
        if re.match("^%s%sh\\d+$" % (NAME_PREFIX, token), netns):
            _kill_all_in(netns)
            _run(["ip", "netns", "delete", netns], check=False)
    state = os.path.join(STATE_ROOT, token)
    if os.path.isdir(state):
        for name in os.listdir(state):
            if name.startswith("uts_"):
                _run(["umount", os.path.join(state, name)], check=False)
        mounts = os.path.join(state, "mnt")
        if os.path.isdir(mounts):
            for name in os.listdir(mounts):
                _run(["umount", os.path.join(mounts, name)], check=False)
            _run(["umount", mounts], check=False)
        shutil.rmtree(state, ignore_errors=True)
    ours = re.compile("^%s%s(b|h\\d+)$" % (NAME_PREFIX, token))
    for link in _links():
        if ours.match(link):
            _run(["ip", "link", "delete", link], check=False)


def _links():
    out = _run(["ip", "-o", "link", "show"], check=False).stdout
    return [m.group(1) for m in re.finditer(r"^\d+: ([^:@\s]+)", out, re.M)]


def _stale_tokens():
    """Tokens whose maker no longer runs, from namespaces, links and state dirs."""
    pattern = re.compile("^%s([0-9a-f]+x\\d+)" % NAME_PREFIX)
    names = _links() + _run(["ip", "netns", "list"], check=False).stdout.split()
    if os.path.isdir(STATE_ROOT):
        names += [NAME_PREFIX + d for d in os.listdir(STATE_ROOT)]
    tokens = {m.group(1) for m in map(pattern.match, names) if m}
    return sorted(t for t in tokens if not _token_owner_alive(t))


def _free_subnet():
    used = _run(["ip", "-4", "route", "show", "table", "all"], check=False).stdout
    used_nets = []
    for word in used.split():
        try:
            used_nets.append(ipaddress.ip_network(word, strict=False))
        except ValueError:
            pass
    for third in range(1, 255):
        candidate = ipaddress.ip_network(_SUBNET_BASE % third)
        if not any(candidate.overlaps(net) for net in used_nets if net.prefixlen > 0):
            return candidate
    raise RuntimeError("simulated hosts: no free 10.213.X.0/24 subnet left")


def _under_private_mount(path):
    return any(path == m or path.startswith(m + "/") for m in _PRIVATE_MOUNTS)


def shared_paths():
    """The paths every host must see as the launcher does, outermost only
    (one under another is visible through it), resolved."""
    wanted = {os.path.realpath(p) for p in [sys.prefix, _REPO] + list(SHARED_PATHS) if p}
    wanted = {p for p in wanted if os.path.isdir(p)}
    return sorted(p for p in wanted
                  if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in wanted))


class SimulatedHosts(object):
    """Context manager making `n_hosts` simulated hosts; see the module docstring.

    rate: None for an unshaped link, or a tc rate such as "2gbit" applied to
    each host's link in both directions (token bucket, 4 MB burst, 5 ms latency).
    """

    HOSTNAME_FORMAT = "simhost%d"

    def __init__(self, n_hosts=2, rate=None):
        if n_hosts < 1:
            raise ValueError("n_hosts must be at least 1, got %d" % n_hosts)
        self.n_hosts = n_hosts
        self.rate = rate
        self.token = "%xx%d" % (os.getpid(), next(_instances))
        self.hostnames = [self.HOSTNAME_FORMAT % i for i in range(n_hosts)]
        self.state_dir = os.path.join(STATE_ROOT, self.token)
        self.agent = os.path.join(self.state_dir, "rsh_agent")
        self.subnet = None
        self.addresses = {}
        self._made = False

    # -- names -------------------------------------------------------------
    def netns(self, hostname):
        """The network namespace (under /run/netns) of `hostname`."""
        return "%s%sh%d" % (NAME_PREFIX, self.token, self.hostnames.index(hostname))

    def uts_file(self, hostname):
        return os.path.join(self.state_dir, "uts_%s" % hostname)

    def mount_file(self, hostname):
        """The file holding `hostname`'s mount namespace open."""
        return os.path.join(self.state_dir, "mnt", hostname)

    @property
    def bridge(self):
        return "%s%sb" % (NAME_PREFIX, self.token)

    # -- lifetime ------------------------------------------------------------
    def __enter__(self):
        ok, why = namespaces_available()
        if not ok:
            raise RuntimeError("simulated hosts unavailable: " + why)
        try:
            self._create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _create(self):
        os.makedirs(STATE_ROOT, exist_ok=True)
        # One maker at a time picks a subnet and cleans up, so two concurrent
        # runs never take the same subnet or remove each other's hosts.
        with open(_LOCK_FILE, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            for token in _stale_tokens():
                _remove_token(token)
            os.makedirs(self.state_dir)
            self._made = True
            with open(os.path.join(self.state_dir, "owner"), "w") as f:
                f.write("%d %s\n" % (os.getpid(), _start_time(os.getpid())))
            self.subnet = str(_free_subnet())
            net = ipaddress.ip_network(self.subnet)
            bridge_ip = "%s/%d" % (net[1], net.prefixlen)
            _run(["ip", "link", "add", self.bridge, "type", "bridge"])
            _run(["ip", "addr", "add", bridge_ip, "dev", self.bridge])
            _run(["ip", "link", "set", self.bridge, "up"])
        # A mount namespace can be held open only by a file on a private
        # mount (else it would propagate into the namespace itself).
        mounts = os.path.join(self.state_dir, "mnt")
        os.makedirs(mounts)
        _run(["mount", "--bind", mounts, mounts])
        _run(["mount", "--make-private", mounts])
        for i, hostname in enumerate(self.hostnames):
            self.addresses[hostname] = str(net[10 + i])
            self._create_host(hostname, "%s/%d" % (net[10 + i], net.prefixlen))
        self._write_agent()

    def _create_host(self, hostname, address):
        netns, outside = self.netns(hostname), self.netns(hostname)
        _run(["ip", "netns", "add", netns])
        # The root end is named like the namespace; the host's end is eth0.
        _run(["ip", "link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", netns])
        _run(["ip", "link", "set", outside, "master", self.bridge])
        _run(["ip", "link", "set", outside, "up"])
        inside = ["ip", "netns", "exec", netns]
        _run(inside + ["ip", "link", "set", "lo", "up"])
        _run(inside + ["ip", "addr", "add", address, "dev", "eth0"])
        _run(inside + ["ip", "link", "set", "eth0", "up"])
        if self.rate:
            shape = ["qdisc", "add", "dev", None, "root", "tbf", "rate", self.rate,
                     "burst", "4mb", "latency", "5ms"]
            _run(["tc"] + [outside if w is None else w for w in shape])  # towards the host
            _run(inside + ["tc"] + ["eth0" if w is None else w for w in shape])  # from it
        uts = self.uts_file(hostname)
        open(uts, "w").close()
        _run(["unshare", "--uts=" + uts, "hostname", hostname])
        self._create_private_filesystems(hostname)

    def _create_private_filesystems(self, hostname):
        """A mount namespace with fresh tmpfs on /dev/shm and /tmp, the
        shared paths under them bound back in (staged outside /tmp first,
        since the tmpfs hides them)."""
        held = self.mount_file(hostname)
        open(held, "w").close()
        stage = os.path.join(self.state_dir, "stage_%s" % hostname)
        steps = ["set -e"]
        kept = [p for p in shared_paths() if _under_private_mount(p)]
        for i, path in enumerate(kept):
            steps.append("mkdir -p %s/%d && mount --bind %s %s/%d" % (stage, i, path, stage, i))
        for mount_point in _PRIVATE_MOUNTS:
            steps.append("mount -t tmpfs -o mode=1777 tmpfs %s" % mount_point)
        for i, path in enumerate(kept):
            steps.append("mkdir -p %s && mount --move %s/%d %s" % (path, stage, i, path))
        _run(["unshare", "--mount=" + held, "--propagation", "private",
              "sh", "-c", " && ".join(steps)])

    def _write_agent(self):
        cases = "".join(
            '  %s) exec nsenter --net=/run/netns/%s --uts=%s --mount=%s /bin/sh -c "$*" ;;\n'
            % (h, self.netns(h), self.uts_file(h), self.mount_file(h)) for h in self.hostnames)
        script = (
            "#!/bin/sh\n"
            "# rsh agent for simulated hosts %s: runs a command inside a host's namespaces.\n"
            "# Skips ssh-style options (-p PORT, -l USER, -o OPT take a value).\n"
            "while [ $# -gt 0 ]; do\n"
            "  case \"$1\" in\n"
            "    -p|-l|-o|-i|-F) shift 2 ;;\n"
            "    -*) shift ;;\n"
            "    *) break ;;\n"
            "  esac\n"
            "done\n"
            "host=$1; shift\n"
            "case \"$host\" in\n"
            "%s"
            "  *) echo \"simulated hosts agent: unknown host '$host'\" >&2; exit 255 ;;\n"
            "esac\n" % (" ".join(self.hostnames), cases))
        with open(self.agent, "w") as f:
            f.write(script)
        os.chmod(self.agent, 0o755)

    def close(self):
        """Kills every process on the hosts and removes all the harness made."""
        if self._made:
            _remove_token(self.token)
            self._made = False

    # -- use -----------------------------------------------------------------
    def pids_on(self, hostname):
        """Every process running on `hostname` (its ranks, Open MPI's daemon, ...)."""
        return _netns_pids(self.netns(hostname))

    def host_path(self, hostname, path):
        """`path` as `hostname` sees it (its own /dev/shm and /tmp), through
        the root of one of its live processes; None while none runs there."""
        for pid in self.pids_on(hostname):
            root = "/proc/%d/root" % pid
            if os.path.exists(root + path):
                return root + path
        return None

    def kill_host(self, hostname, sig=signal.SIGKILL):
        """Sends `sig` to every process on `hostname` at once; returns their pids."""
        pids = self.pids_on(hostname)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        return pids

    def run_on(self, hostname, command, **kwargs):
        """subprocess.run of the shell `command` on `hostname`, through the agent."""
        return subprocess.run([self.agent, hostname, command], **kwargs)

    def mpi_args(self, ranks_per_host):
        """The same as raw mpirun arguments (for running mpirun without tfringrun):
        reach the hosts through the agent, keep both control (PRRTE's
        out-of-band) and data (BTL) traffic on the harness's subnet."""
        return ["-np", str(ranks_per_host * self.n_hosts), "--host", self.hosts_arg(ranks_per_host),
                "--map-by", "ppr:%d:node" % ranks_per_host,
                "--mca", "plm_rsh_agent", self.agent, "--prtemca", "plm_rsh_agent", self.agent,
                "--prtemca", "oob_tcp_if_include", self.subnet,
                "--mca", "btl_tcp_if_include", self.subnet]

    def hosts_arg(self, ranks_per_host):
        return ",".join("%s:%d" % (h, ranks_per_host) for h in self.hostnames)

    def launcher_args(self, ranks_per_host):
        """tfringrun arguments for `ranks_per_host` ranks on each host (place
        them before the command)."""
        return ["-np", str(ranks_per_host * self.n_hosts)] + self.launcher_flags(ranks_per_host)

    def launcher_flags(self, ranks_per_host):
        """launcher_args without -np, for helpers that add -np themselves."""
        return ["-H", self.hosts_arg(ranks_per_host), "--rsh-agent", self.agent,
                "--network-interface", self.subnet,
                "--mpi-args", "--map-by ppr:%d:node" % ranks_per_host]
