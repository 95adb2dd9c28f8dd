"""tfringrun refuses --warm-spares outside an elastic restart job, as a
usage error (exit 2) naming what is missing, before it starts anything. The
stand-in and its spares without MPI: tests/unit/test_warm_spares.py."""
import subprocess
import sys

import pytest


@pytest.mark.parametrize("wrong, says", [
    (["-np", "2", "--warm-spares", "python", "t.py"], "elastic job"),
    (["-np", "2", "--min-np", "1", "-H", "a:1,b:1", "--warm-spares", "--recovery", "in-process",
      "python", "t.py"], "--recovery restart")])
def test_warm_spares_outside_an_elastic_restart_job_is_a_usage_error(wrong, says):
    done = subprocess.run([sys.executable, "-m", "tf_ring.run"] + wrong, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and says in done.stderr, done.stderr
