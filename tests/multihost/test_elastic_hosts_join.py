"""(b) of issue 20 on 3 simulated hosts x 1 rank, the launcher outside them:
the discovery script lists 2 hosts, then a third appears mid-epoch. At the
next commit every rank raises HostsUpdatedInterrupt, the job goes on at 3
ranks from that commit (a coordinated restart, in both recovery modes), the
third host's rank starts with the others' weights, and the job ends 0 with
the weights of an uninterrupted run (computed in NumPy)."""
import json
import re
import sys

import numpy as np
import pytest

from multihost.elastic_runs import JOBS, TAPE_JOB, run_counter, text
from multihost.simulated_hosts import SimulatedHosts, namespaces_available

sys.path.insert(0, JOBS)
import tape_data  # noqa: E402

AVAILABLE, WHY = namespaces_available()
pytestmark = pytest.mark.skipif(not AVAILABLE, reason=WHY)


@pytest.mark.parametrize("recovery", ["restart", "in-process"])
def test_a_host_that_appears_joins_at_the_next_commit(tmp_path, recovery):
    listed = tmp_path / "hosts"
    listed.write_text("simhost0\nsimhost1\n")
    discovery = tmp_path / "discover.sh"
    discovery.write_text("#!/bin/sh\ncat %s\n" % listed)
    discovery.chmod(0o755)

    def add_a_host_at_step_5(line):
        if line.startswith("STEP rank=0 size=2 step=5 "):
            listed.write_text("simhost0\nsimhost1\nsimhost2\n")

    with SimulatedHosts(3) as hosts:
        rc, lines = run_counter(hosts, str(tmp_path), min_np=2, job_env={}, job=TAPE_JOB,
                                recovery=recovery, on_line=add_a_host_at_step_5,
                                discovery=str(discovery))
    out, err = text(lines, "out"), text(lines, "err")
    assert rc == 0, out[-3000:] + err[-5000:]
    assert "elastic world 0: 2 ranks on simhost0:1,simhost1:1" in err, err[-5000:]
    assert "elastic world 1: 3 ranks on simhost0:1,simhost1:1,simhost2:1" in err, err[-5000:]
    resumed = [int(s) for s in re.findall(r"START rank=\d size=3 step=(\d+)", out)]
    assert len(resumed) == 3 and len(set(resumed)) == 1 and resumed[0] >= 5, out
    ends = re.findall(r"END rank=(\d) size=(\d) step=(\d+) w=(.*)", out)
    assert sorted(e[:3] for e in ends) == [(str(r), "3", str(tape_data.STEPS)) for r in range(3)], out
    weights = [json.loads(w) for *_, w in ends]
    assert all(w == weights[0] for w in weights), weights  # the new rank's too
    assert np.allclose(weights[0], tape_data.reference_weights(), rtol=1e-5, atol=1e-5), weights
