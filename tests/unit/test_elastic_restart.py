"""tfringrun's coordinated restart: the ranks' half and the driver agree on
the exit code that means 'relaunch at the new size'."""
import subprocess
import sys

from tf_ring.elastic_driver import elastic_plan

LEAVE = "from tf_ring.elastic import restart; restart.exit_for_relaunch()"


def test_a_rank_that_leaves_for_a_relaunch_is_judged_a_relaunch():
    code = subprocess.run([sys.executable, "-c", LEAVE], timeout=60).returncode
    assert code not in (0, 1)  # the rank's own exit, not a success or a Python error
    ended = {0: ("exit", code), 1: ("exit", code)}
    rc, lost = elastic_plan.judge_world(code, ended, [0, 1], [], [], {0: "a", 1: "a"})
    assert (rc, lost) == (code, set())
    # ... and the driver reads that code as "relaunch", not as a failure to report.
    assert rc == elastic_plan.EXIT_HOSTS_UPDATED
