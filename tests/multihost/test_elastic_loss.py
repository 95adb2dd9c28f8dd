"""tfringrun's elastic mode on 3 simulated hosts x 1 rank, the launcher
outside them: (a) a rank's process killed mid-epoch (SIGKILL) in a
tf.function tape loop costs its host, not the job: the driver blacklists
that host, relaunches on the other two, the job resumes from the last commit
with the rest of the epoch re-sharded (tf_ring.elastic.shard_dataset) and
ends 0 with the weights of an uninterrupted run (computed in NumPy);
(f) a rank raising an ordinary Python exception fails the job without a
restart."""
import json
import re
import sys

import numpy as np
import pytest

from multihost.elastic_runs import JOBS, TAPE_JOB, lost_rank, run_counter, text
from multihost.simulated_hosts import SimulatedHosts, namespaces_available

sys.path.insert(0, JOBS)
import tape_data  # noqa: E402

AVAILABLE, WHY = namespaces_available()
pytestmark = pytest.mark.skipif(not AVAILABLE, reason=WHY)


def test_a_killed_rank_blacklists_its_host_and_the_job_ends_on_two(tmp_path):
    with SimulatedHosts(3) as hosts:
        # Step 13 is the third of epoch 1: the reset comes mid-epoch.
        rc, lines, timings = lost_rank(hosts, str(tmp_path), kill_at=13, job=TAPE_JOB)
    out, err = text(lines, "out"), text(lines, "err")
    assert rc == 0, out[-3000:] + err[-5000:]
    assert "ranks were lost on simhost2 (blacklisted); restarting (restart 1)" in err, err[-5000:]
    assert "elastic world 1: 2 ranks on simhost0:1,simhost1:1" in err, err[-5000:]
    ends = re.findall(r"END rank=(\d) size=(\d) step=(\d+) w=(.*)", out)
    assert sorted(e[:3] for e in ends) == [(str(r), "2", str(tape_data.STEPS)) for r in range(2)], out
    expected = tape_data.reference_weights()
    for _, _, _, weights in ends:
        assert np.allclose(json.loads(weights), expected, rtol=1e-5, atol=1e-5), (weights, expected)
    # The 2-rank world resumed at the last commit before the kill, not at 0.
    resumed = {int(s) for s in re.findall(r"START rank=\d size=2 step=(\d+)", out)}
    assert len(resumed) == 1 and 12 <= resumed.pop() <= 13, out
    assert timings["first_step"] > 0
    print("kill -> first 2-rank step: %.1f s (relaunch %.1f s, synced %.1f s)"
          % (timings["first_step"], timings["relaunch"], timings["synced"]))


def test_a_python_exception_in_a_rank_is_no_host_loss(tmp_path):
    with SimulatedHosts(3) as hosts:
        rc, lines = run_counter(hosts, str(tmp_path), min_np=2,
                                job_env={"COUNTER_RAISE_RANK_AT": "3"})
    err = text(lines, "err")
    assert rc != 0, err[-5000:]
    assert "ValueError: counter_job: an ordinary bug at step 3" in err, err[-5000:]
    assert "restarting" not in err and "blacklisted" not in err, err[-5000:]
    assert err.count("elastic world") == 1, err[-5000:]
