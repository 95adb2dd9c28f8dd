"""tfringrun's coordinated restart with real processes on this machine:
discovery grows from 2 to 3 slots mid-run, every rank leaves at a commit and
the job goes on at 3 ranks from the mirrored commit, with the counter's
total equal to an uninterrupted run's. Growing is a coordinated restart in
both recovery modes, so both are run."""
import os
import re
import subprocess
import sys
import threading
import time

import pytest

from conftest import REPO

JOB = os.path.join(REPO, "tests", "elastic_jobs", "counter_job.py")
EXPECTED_TOTAL = sum(range(30))  # the uninterrupted result


@pytest.mark.parametrize("recovery", ["restart", "in-process"])
def test_gain_relaunches_at_three_ranks_from_the_last_commit(tmp_path, recovery):
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost:2\n")
    found = tmp_path / "discover.sh"
    found.write_text("#!/bin/sh\ncat %s\n" % hosts)
    found.chmod(0o755)
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.Popen([sys.executable, "-m", "tf_ring.run", "-np", "2", "--min-np", "2",
                             "--max-np", "3", "--host-discovery-script", str(found),
                             "--recovery", recovery, "--oversubscribe", sys.executable, JOB],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=open(tmp_path / "err", "w"),
                            text=True)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.time() + 120
        while not any(l.startswith("STEP rank=0 size=2 step=5 ") for l in lines):
            assert time.time() < deadline and proc.poll() is None, "".join(lines)
            time.sleep(0.2)
        hosts.write_text("localhost:3\n")
        proc.wait(timeout=240)  # only the reader thread reads stdout
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(5)
    out, err = "".join(lines), (tmp_path / "err").read_text()
    assert proc.returncode == 0, out + err
    assert "elastic world 1: 3 ranks" in err, err
    ends = re.findall(r"END rank=(\d) size=(\d) step=(\d+) total=(\d+)", out)
    assert sorted(ends) == [(str(r), "3", "30", str(EXPECTED_TOTAL)) for r in range(3)], out
    # The 3-rank world's first step continues the count: resumed, not from zero.
    first = min(int(s) for s in re.findall(r"STEP rank=\d size=3 step=(\d+)", out))
    assert first >= 6, out
