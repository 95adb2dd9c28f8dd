"""A host that dies mid-training, goes silent (its link down), or whose
daemon cannot start, fails the whole job with a non-zero exit naming that
host, and leaves nothing behind. 2 simulated hosts x 2 ranks."""
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO
from multihost.simulated_hosts import SimulatedHosts, namespaces_available
from tf_ring.run import orphan_daemons

AVAILABLE, WHY = namespaces_available()
pytestmark = pytest.mark.skipif(not AVAILABLE, reason=WHY)

TRAINING = os.path.join(os.path.dirname(os.path.abspath(__file__)), "endless_training.py")
# Ranks on other hosts start in this directory but need tf_ring importable.
ENV = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")


def start_job(launcher_args, command):
    return subprocess.Popen([sys.executable, "-m", "tf_ring.run"] + launcher_args + command,
                            cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def finish(proc, timeout):
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        subprocess.run(["pkill", "-KILL", "-s", str(proc.pid)], check=False)
        out, err = proc.communicate()
        pytest.fail("the job did not end within %d s\n%s\n%s" % (timeout, out[-3000:], err[-5000:]))


def wait_until_every_rank_trains(proc, ranks=4):
    """Reads the job's output until `ranks` TRAINING lines came: every rank is in its loop."""
    training = 0
    while training < ranks:
        line = proc.stdout.readline()
        if not line:
            pytest.fail("job ended early:\n" + proc.stderr.read()[-5000:])
        training += line.startswith("TRAINING")


def leftovers(hosts, proc):
    """Processes still on the hosts, or in the job's session on this machine."""
    pids = [p for host in hosts.hostnames for p in hosts.pids_on(host)]
    pids += subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True,
                           text=True).stdout.split()
    return subprocess.run(["ps", "-o", "pid,stat,args", "-p", ",".join(map(str, pids))],
                          capture_output=True, text=True).stdout if pids else ""


def assert_nothing_left(hosts, proc, within=15):
    """Dying processes (exiting, or zombies not yet reaped) get `within` s."""
    deadline = time.time() + within
    while leftovers(hosts, proc) and time.time() < deadline:
        time.sleep(0.5)
    assert leftovers(hosts, proc) == ""


# The launcher's side does not depend on what the ranks run: TensorFlow
# training where the issue saw it, and a light mpi4py allreduce loop (no
# TensorFlow to import on 4 ranks) for the host that runs rank 0.
MPI_LOOP = ("import time; from mpi4py import MPI; import numpy as np; c = MPI.COMM_WORLD; "
            "x = np.ones(1000); [c.Allreduce(MPI.IN_PLACE, x) for _ in range(5)]; "
            "print('TRAINING rank', c.rank, flush=True); "
            "[(c.Allreduce(MPI.IN_PLACE, x), time.sleep(0.01)) for _ in range(60000)]")


@pytest.mark.parametrize("victim,command", [
    (1, [sys.executable, TRAINING]),
    (0, [sys.executable, "-c", MPI_LOOP]),
], ids=["second-host-tf-training", "host-of-rank-0-mpi-loop"])
def test_killing_a_host_mid_training_fails_the_job_naming_it(victim, command):
    with SimulatedHosts(2) as hosts:
        proc = start_job(hosts.launcher_args(2), command)
        wait_until_every_rank_trains(proc)
        dead = hosts.hostnames[victim]
        killed = hosts.kill_host(dead)
        assert killed  # its ranks and Open MPI's daemon
        start = time.time()
        out, err = finish(proc, timeout=60)
        elapsed = time.time() - start
        assert proc.returncode != 0, err[-3000:]
        assert elapsed < 30, elapsed
        ranks = "%d, %d" % (2 * victim, 2 * victim + 1)
        assert "tfringrun: host %s (ranks %s) was lost" % (dead, ranks) in err, err[-3000:]
        assert "0 of 4 ranks finished cleanly" in err
        assert "tfringrun-status" not in out + err  # the status lines are the launcher's
        assert_nothing_left(hosts, proc)


def test_a_host_gone_silent_fails_the_job_naming_it():
    """The second host's link goes down while every rank is in the loop: no
    process dies and no socket closes, so without the launcher's heartbeat
    the job would wait until TCP gives up. With --detection-timeout 5 it
    ends within seconds, non-zero, naming the silent host, and leaves
    nothing behind on the host still reachable."""
    with SimulatedHosts(2) as hosts:
        proc = start_job(hosts.launcher_args(2) + ["--detection-timeout", "5"],
                         [sys.executable, "-c", MPI_LOOP])
        wait_until_every_rank_trains(proc)
        silent = hosts.hostnames[1]
        subprocess.run(["ip", "link", "set", hosts.netns(silent), "down"], check=True)
        start = time.time()
        out, err = finish(proc, timeout=60)
        elapsed = time.time() - start
        assert proc.returncode != 0, err[-3000:]
        assert "tfringrun: nothing heard from %s for 5 s (--detection-timeout)" % silent in err, \
            err[-3000:]
        assert "tfringrun: host %s (ranks 2, 3) was lost" % silent in err, err[-3000:]
        # The timeout from the last beat (up to 5 / 3.5 s before the cut),
        # then mpirun gets 3 s to stop before it is killed.
        assert 5 - 5 / 3.5 - 0.2 < elapsed < 20, elapsed
        assert "tfringrun-status" not in out + err
        deadline = time.time() + 15
        while hosts.pids_on(hosts.hostnames[0]) and time.time() < deadline:
            time.sleep(0.5)
        assert hosts.pids_on(hosts.hostnames[0]) == []
    print("silent host -> plain job stopped after %.1f s (--detection-timeout 5)" % elapsed)


def test_a_host_whose_daemon_stops_forwarding_output_still_beats_over_udp():
    """The second host's Open MPI daemon is stopped (SIGSTOP) for 10 s while
    its ranks go on: the status lines' beats, which travel through that
    daemon, stop; the UDP beats, sent from beside each rank straight to the
    launcher, do not. With --detection-timeout 5 the host is not declared
    lost, the job ends 0, and the launcher's summary shows both silences."""
    loop = MPI_LOOP.replace("range(60000)", "range(2000)")  # about 20 s
    with SimulatedHosts(2) as hosts:
        proc = start_job(hosts.launcher_args(2) + ["--detection-timeout", "5"],
                         [sys.executable, "-c", loop])
        wait_until_every_rank_trains(proc)
        daemons = [pid for pid in hosts.pids_on(hosts.hostnames[1])
                   if open("/proc/%d/comm" % pid).read().strip() == "prted"]
        assert daemons  # prted (the agent may show it twice: its shell and itself)
        for pid in daemons:
            os.kill(pid, signal.SIGSTOP)
        time.sleep(10)
        for pid in daemons:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass  # the launcher declared the host lost and stopped the job (the asserts say so)
        out, err = finish(proc, timeout=120)
        assert proc.returncode == 0, err[-3000:]
        assert "nothing heard from" not in err, err[-3000:]
        summary = [line for line in err.splitlines() if "tfringrun: heartbeats:" in line]
        assert len(summary) == 1, err[-3000:]  # one per mpirun whose ranks ran
        output_gap = float(summary[0].split(" s on mpirun's output")[0].rsplit(" ", 1)[1])
        udp_gap = float(summary[0].split(" s over UDP")[0].rsplit(" ", 1)[1])
        assert output_gap > 8 and udp_gap < 3, err[-3000:]


def write_agent(path, real_agent, broken_host, action):
    """An agent that does `action` instead of reaching `broken_host`."""
    with open(path, "w") as f:
        f.write('#!/bin/sh\ncase "$1" in %s) %s ;; esac\nexec %s "$@"\n'
                % (broken_host, action, real_agent))
    os.chmod(path, 0o755)


def with_agent(args, agent):
    args = list(args)
    args[args.index("--rsh-agent") + 1] = agent
    return args


def test_a_host_whose_agent_fails_fails_the_job_naming_it(tmp_path):
    with SimulatedHosts(2) as hosts:
        agent = str(tmp_path / "agent")
        write_agent(agent, hosts.agent, "simhost1",
                    'echo "ssh: connect to host simhost1 port 22: No route to host" >&2; exit 255')
        proc = start_job(with_agent(hosts.launcher_args(2), agent), ["true"])
        out, err = finish(proc, timeout=60)
        assert proc.returncode != 0
        assert "tfringrun: host simhost1 (ranks 2, 3): mpirun could not start or reach its " \
               "daemon there" in err, out + err
        assert "host simhost0" not in err
        assert_nothing_left(hosts, proc)


def test_an_unreachable_host_fails_the_job_naming_it():
    with SimulatedHosts(2) as hosts:
        # The daemon starts but cannot connect back: the host's link is down.
        assert hosts.run_on("simhost1", "ip link set eth0 down").returncode == 0
        proc = start_job(hosts.launcher_args(2), ["true"])
        out, err = finish(proc, timeout=120)
        assert proc.returncode != 0
        assert "tfringrun: host simhost1 (ranks 2, 3): mpirun could not start" in err, out + err
        assert_nothing_left(hosts, proc)


def test_the_launchers_cleanup_stops_a_daemon_left_waiting_on_a_host():
    """The unreachable-host case above, made certain: Open MPI's daemon there
    sometimes waits for mpirun forever (seen in CI). A stand-in daemon named
    like one of job 4242's is stopped through the agent; another job's is not."""
    with SimulatedHosts(2) as hosts:
        sleeper = "import time; time.sleep(600)"
        for job in ("4242", "4243"):
            hosts.run_on("simhost1", "setsid %s -c '%s' prterun-node-%s@0 "
                         "</dev/null >/dev/null 2>&1 &" % (sys.executable, sleeper, job))
        deadline = time.time() + 10
        while len(hosts.pids_on("simhost1")) < 2 and time.time() < deadline:
            time.sleep(0.1)
        assert len(hosts.pids_on("simhost1")) == 2
        orphan_daemons.stop_orphaned_daemons(["simhost1"], 4242, rsh_agent=hosts.agent)
        deadline = time.time() + 10
        while len(hosts.pids_on("simhost1")) > 1 and time.time() < deadline:
            time.sleep(0.1)
        left = []
        for pid in hosts.pids_on("simhost1"):
            with open("/proc/%d/cmdline" % pid) as f:
                left.append(f.read().replace("\0", " "))
        assert len(left) == 1 and "prterun-node-4243@0" in left[0], left


def test_a_hanging_agent_hits_the_start_timeout(tmp_path):
    with SimulatedHosts(2) as hosts:
        agent = str(tmp_path / "agent")
        # Like ssh waiting for a password nobody types.
        write_agent(agent, hosts.agent, "simhost1", "exec sleep 600")
        start = time.time()
        proc = start_job(["--start-timeout", "5"] + with_agent(hosts.launcher_args(2), agent),
                         ["true"])
        out, err = finish(proc, timeout=150)
        assert proc.returncode == 1, err
        assert time.time() - start < 60  # 5 s, then up to 10 s for mpirun to obey SIGTERM
        assert "4 of 4 ranks had not started 5 s after launch (--start-timeout)" in err, err
        assert "simhost1 (ranks 2, 3)" in err
        assert_nothing_left(hosts, proc)
