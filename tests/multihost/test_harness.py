"""The simulated hosts harness: Open MPI and tf_ring see separate machines,
and the harness leaves nothing behind."""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO
from multihost.simulated_hosts import SimulatedHosts, namespaces_available, NAME_PREFIX

AVAILABLE, WHY = namespaces_available()
pytestmark = pytest.mark.skipif(not AVAILABLE, reason=WHY)

# Each rank prints what tf_ring reports about the topology, as one JSON line.
TOPOLOGY_SCRIPT = (
    "import json, socket, tf_ring as r; r.init(); "
    "print('TOPOLOGY ' + json.dumps(dict(rank=r.rank(), size=r.size(), local_rank=r.local_rank(), "
    "local_size=r.local_size(), cross_rank=r.cross_rank(), cross_size=r.cross_size(), "
    "host=socket.gethostname())))")


def leftovers():
    """Namespaces and links of this process's harness instances still present."""
    mine = "%s%xx" % (NAME_PREFIX, os.getpid())
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    names += subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout.split()
    return [n for n in names if n.startswith(mine)]


def test_two_hosts_two_ranks_each_see_the_topology():
    with SimulatedHosts(2) as hosts:
        assert len(set(hosts.hostnames)) == 2
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        result = subprocess.run(
            [sys.executable, "-m", "tf_ring.run"] + hosts.launcher_args(2)
            + [sys.executable, "-c", TOPOLOGY_SCRIPT],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-4000:]
    seen = sorted((json.loads(line.split(" ", 1)[1]) for line in result.stdout.splitlines()
                   if line.startswith("TOPOLOGY ")), key=lambda t: t["rank"])
    assert [t["rank"] for t in seen] == [0, 1, 2, 3], result.stdout
    for t in seen:
        assert (t["size"], t["local_size"], t["cross_size"]) == (4, 2, 2)
        # By-slot placement: ranks 0, 1 on the first host, 2, 3 on the second.
        assert t["host"] == hosts.hostnames[t["rank"] // 2]
        assert (t["local_rank"], t["cross_rank"]) == (t["rank"] % 2, t["rank"] // 2)
    assert not leftovers()


def test_hosts_are_reachable_shaped_and_torn_down_after_an_error():
    with pytest.raises(ZeroDivisionError):
        with SimulatedHosts(2, rate="2gbit") as hosts:
            host0, host1 = hosts.hostnames
            out = hosts.run_on(host0, "hostname; tc qdisc show dev eth0",
                               capture_output=True, text=True).stdout
            assert out.startswith(host0 + "\n") and "tbf" in out and "2Gbit" in out
            # host0 reaches host1's address over the bridge (bash's /dev/tcp
            # needs no extra tools): host1 listens, host0 connects.
            listener = subprocess.Popen(
                [hosts.agent, host1, "exec python3 -c \"import socket; s = socket.socket(); "
                 "s.bind(('%s', 5555)); s.listen(1); c, _ = s.accept(); print(c.recv(16).decode())\""
                 % hosts.addresses[host1]], stdout=subprocess.PIPE, text=True)
            sent = hosts.run_on(host0, "for i in 1 2 3 4 5 6 7 8 9 10; do "
                                "python3 -c \"import socket; socket.create_connection(('%s', 5555), 2)"
                                ".sendall(b'hello')\" && exit 0; sleep 0.2; done; exit 1"
                                % hosts.addresses[host1], timeout=60)
            assert sent.returncode == 0
            assert listener.communicate(timeout=30)[0].strip() == "hello"
            assert hosts.pids_on(host1) == []  # the listener has exited
            1 / 0
    assert not leftovers()
    assert not os.path.exists(hosts.state_dir)


def test_a_crashed_runs_hosts_are_removed_by_the_next_run():
    tests_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    crashed = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; sys.path.insert(0, %r); "
         "from multihost.simulated_hosts import SimulatedHosts; h = SimulatedHosts(2).__enter__(); "
         "print(h.token, flush=True); time.sleep(600)" % tests_dir],
        stdout=subprocess.PIPE, text=True)
    token = crashed.stdout.readline().strip()
    crashed.kill()  # SIGKILL: no chance to tear down
    crashed.wait()
    stale = NAME_PREFIX + token
    netns = lambda: subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert stale + "h0" in netns()
    with SimulatedHosts(1):
        assert stale not in netns()
        assert stale not in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert not leftovers()


def test_each_host_has_its_own_dev_shm_and_tmp_and_sees_the_shared_paths(tmp_path):
    """What one host writes to /dev/shm or /tmp, no other host and not the
    launcher's machine sees (as on real hosts); the environment, the
    repository and pytest's directory stay visible everywhere."""
    shared_file = tmp_path / "shared.txt"
    shared_file.write_text("from the launcher\n")
    name = "tfrs-harness-%d" % os.getpid()
    with SimulatedHosts(2) as hosts:
        host0, host1 = hosts.hostnames
        for where in ("/dev/shm", "/tmp"):
            wrote = hosts.run_on(host0, "echo %s > %s/%s" % (host0, where, name))
            assert wrote.returncode == 0
            seen = hosts.run_on(host0, "cat %s/%s" % (where, name), capture_output=True, text=True)
            assert seen.stdout.strip() == host0
            other = hosts.run_on(host1, "ls %s/%s" % (where, name), capture_output=True, text=True)
            assert other.returncode != 0, (where, other.stdout)
            assert not os.path.exists(os.path.join(where, name))
        for host in (host0, host1):
            checked = hosts.run_on(host, "cat %s && test -x %s && test -f %s"
                                   % (shared_file, sys.executable, os.path.join(REPO, "setup.py")),
                                   capture_output=True, text=True)
            assert checked.returncode == 0 and checked.stdout.split("\n")[0] == "from the launcher", \
                checked.stderr
            # The host's files end up where the launcher can read them only
            # through a shared path.
            hosts.run_on(host, "echo %s >> %s" % (host, shared_file))
    assert shared_file.read_text().split("\n")[1:3] == [host0, host1]
    assert not leftovers()
