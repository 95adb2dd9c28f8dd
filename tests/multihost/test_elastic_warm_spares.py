"""tfringrun --warm-spares on simulated hosts, restart mode, the launcher
outside them: once every slot holds a ready spare (TensorFlow and tf_ring
imported), the last host is killed whole (its ranks, its Open MPI daemon
and its spares). The 2-rank world's ranks must be the spares that waited
on the other hosts' slots (warm=1, the spares' PIDs), resume from the last
commit, and end with the total of an uninterrupted run; no spare may
outlive the job. And a host the discovery script adds gets its spare
before the job grows onto it."""
import os
import re
import time

import pytest

from multihost.elastic_runs import UNINTERRUPTED_TOTAL, ready_spares, run_counter, text
from multihost.simulated_hosts import SimulatedHosts, namespaces_available

AVAILABLE, WHY = namespaces_available()
pytestmark = pytest.mark.skipif(not AVAILABLE, reason=WHY)


def spare_processes():
    done = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if b"warm_spares.py\0spare\0/dev/shm/tf_ring-elastic-" in f.read():
                    done.append(int(pid))
        except OSError:
            pass
    return done


@pytest.mark.parametrize("n_hosts,per_host", [(3, 1), (2, 2)])
def test_a_host_lost_restarts_the_job_on_the_spares_waiting_on_the_others(tmp_path, n_hosts,
                                                                          per_host):
    """3 hosts x 1 rank -> 2 x 1; and 2 hosts x 2 ranks -> 1 x 2, where each
    of the survivor's two local slots has its own spare."""
    before = set(spare_processes())
    began = time.time() - 1
    lost = "simhost%d" % (n_hosts - 1)
    with SimulatedHosts(n_hosts) as hosts:
        killed = {}

        def kill_once_every_slot_has_a_spare(line):
            if killed or not line.startswith("STEP rank=0 size=%d " % (n_hosts * per_host)):
                return
            spares = ready_spares(hosts, hosts.hostnames, began, per_host)
            if len(spares) == n_hosts * per_host:
                killed.update(spares=spares, at=time.time(), pids=hosts.kill_host(lost))

        # 0.5 s a step: 15 s for 30 steps, time for the spares' imports at low priority.
        rc, lines = run_counter(hosts, str(tmp_path), min_np=2, job_env={"COUNTER_STEP_S": "0.5"},
                                on_line=kill_once_every_slot_has_a_spare, ranks_per_host=per_host,
                                extra_args=["--warm-spares"])
    out, err = text(lines, "out"), text(lines, "err")
    assert killed, "no host had a ready spare before the job ended: " + err[-3000:]
    assert all(pid in killed["pids"] for (host, _), pid in killed["spares"].items()
               if host == lost)  # the spares went with their host
    assert rc == 0, out[-3000:] + err[-5000:]
    assert "ranks were lost on %s (blacklisted); restarting (restart 1)" % lost in err, err[-5000:]
    boots = re.findall(r"BOOT rank=(\d) size=2 .* warm=(\d)", out)
    assert sorted(boots) == [("0", "1"), ("1", "1")], out
    pids = {int(p) for p in re.findall(r"START rank=\d size=2 step=\d+ pid=(\d+)", out)}
    assert pids == {pid for (host, _), pid in killed["spares"].items() if host != lost}, \
        (pids, killed)
    ends = re.findall(r"END rank=(\d) size=2 step=30 total=(\d+)", out)
    assert sorted(ends) == [("0", str(UNINTERRUPTED_TOTAL)), ("1", str(UNINTERRUPTED_TOTAL))], out
    resumed = [float(t) for t, _, l in lines if l.startswith("STEP") and "size=2 " in l]
    print("host lost -> first 2-rank step on warm spares: %.2f s" % (min(resumed) - killed["at"]))
    deadline = time.time() + 15
    while set(spare_processes()) - before:
        assert time.time() < deadline, "spares outlived the job: %s" % (set(spare_processes()) - before)
        time.sleep(0.2)


def test_an_added_host_gets_its_spare_before_the_job_grows_onto_it(tmp_path):
    """(b) with --warm-spares: discovery lists 2 hosts, then a third. The
    driver starts the third host's spare through the remote agent and tells
    rank 0 only once it is ready, so the 3-rank world starts warm on every
    host (the job trains on at 2 ranks meanwhile, and waits for the third
    rank at step 20 rather than end first on a slow machine) and ends with
    the total of an uninterrupted run."""
    listed = tmp_path / "hosts"
    listed.write_text("simhost0\nsimhost1\n")
    discovery = tmp_path / "discover.sh"
    discovery.write_text("#!/bin/sh\ncat %s\n" % listed)
    discovery.chmod(0o755)
    before = set(spare_processes())
    began = time.time() - 1
    with SimulatedHosts(3) as hosts:
        added = {}

        def add_a_host_once_the_two_have_spares(line):
            if not added and line.startswith(("STEP rank=0 size=2 ", "HOLD rank=0 size=2 ")) and \
                    len(ready_spares(hosts, ["simhost0", "simhost1"], began)) == 2:
                added["at"] = time.time()
                listed.write_text("simhost0\nsimhost1\nsimhost2\n")

        job_env = {"COUNTER_STEP_S": "0.5", "COUNTER_HOLD_AT_STEP": "20",
                   "COUNTER_HOLD_UNTIL_SIZE": "3"}
        rc, lines = run_counter(hosts, str(tmp_path), min_np=2, job_env=job_env,
                                on_line=add_a_host_once_the_two_have_spares,
                                discovery=str(discovery), extra_args=["--warm-spares"])
    out, err = text(lines, "out"), text(lines, "err")
    assert added, "the first two hosts had no ready spares before the job ended: " + err[-3000:]
    assert rc == 0, out[-3000:] + err[-5000:]
    assert "tfringrun: warm spares ready on simhost2 after" in err, err[-5000:]
    assert "elastic world 1: 3 ranks on simhost0:1,simhost1:1,simhost2:1" in err, err[-5000:]
    boots = re.findall(r"BOOT rank=(\d) size=3 .* warm=(\d)", out)
    assert sorted(boots) == [("0", "1"), ("1", "1"), ("2", "1")], out
    ends = re.findall(r"END rank=(\d) size=3 step=30 total=(\d+)", out)
    assert sorted(ends) == [(str(r), str(UNINTERRUPTED_TOTAL)) for r in range(3)], out
    grown = min(t for t, _, l in lines if l.startswith("STEP") and "size=3 " in l)
    last_small = max(t for t, _, l in lines if l.startswith("STEP") and "size=2 " in l)
    print("host added -> first 3-rank step %.1f s; training paused %.2f s"
          % (grown - added["at"], grown - last_small))
    deadline = time.time() + 15
    while set(spare_processes()) - before:
        assert time.time() < deadline, "spares outlived the job: %s" % (set(spare_processes()) - before)
        time.sleep(0.2)
