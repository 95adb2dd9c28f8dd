"""In-process recovery's review cases (issue 40), each a tfringrun
--recovery in-process job on this machine (tests/elastic_jobs/
inprocess_review_job.py): the last rank SIGKILLs itself at step 4 and the
survivors go on in their own processes. Checked against values worked out
from the world size, on every step before and after the loss."""
import os
import re
import sys

import pytest

from conftest import REPO
from conftest import executable_script as script
from launcher.test_elastic_driver_jobs import run_job

STEPS = 8
TOTAL = sum(range(STEPS))


def run_review_job(tmp_path, case, ranks, min_np, **job_env):
    jobs = os.path.join(REPO, "tests", "elastic_jobs")
    discover = script(tmp_path, "echo $(uname -n):%d\n" % ranks)
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2", REVIEW_CASE=case,
               COUNTER_KILL_RANK_AT="4", COUNTER_MARKER=str(tmp_path / "killed"), **job_env)
    done = run_job([sys.executable, "-m", "tf_ring.run", "-np", str(ranks), "--min-np",
                    str(min_np), "--host-discovery-script", discover, "--recovery", "in-process",
                    sys.executable, os.path.join(jobs, "inprocess_review_job.py")], env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return done


def assert_survivors_went_on(done, before, after):
    """Ranks 0..after-1 started at `before` ranks and went on at `after` in
    the same processes, to the end with the total of an uninterrupted run."""
    starts = re.findall(r"START rank=(\d) size=(\d) step=\d+ pid=(\d+)", done.stdout)
    first = {r: pid for r, size, pid in starts if size == str(before)}
    last = {r: pid for r, size, pid in starts if size == str(after)}
    assert sorted(last) == [str(r) for r in range(after)], starts
    assert all(last[r] == first[r] for r in last), starts
    for rank in range(after):
        assert "END rank=%d size=%d step=%d total=%d pid=%s" % (
            rank, after, STEPS, TOTAL, last[str(rank)]) in done.stdout, done.stdout[-3000:]


def assert_every_check_passed(done, after):
    checks = re.findall(r"CHECK rank=(\d) size=(\d) step=(\d+) ok=(\w+)(.*)", done.stdout)
    assert any(size == str(after) for _, size, _, _, _ in checks), checks
    bad = [c for c in checks if c[3] != "True"]
    assert not bad, bad


@pytest.mark.parametrize("ranks", [2, 3])
def test_a_traced_step_divides_by_the_size_after_a_shrink(tmp_path, ranks):
    """Traced before the loss: an embedding's sparse gradient averaged by
    DistributedGradientTape ((size + 1) / 2 from ranks giving 1..size), a
    local source's gradient divided by the size, a Sum reducescatter's
    gradient (the size) and a Keras optimizer's step of a local variable
    (-1/size); after the shrink each uses the new size."""
    done = run_review_job(tmp_path, "traced_size", ranks, min_np=1)
    assert_every_check_passed(done, ranks - 1)
    assert_survivors_went_on(done, ranks, ranks - 1)


@pytest.mark.parametrize("ranks", [2, 3])
def test_process_set_ids_survive_a_shrink_that_empties_a_set(tmp_path, ranks):
    """Sets [last], Y = [all but the last] (and [0] on 3 ranks): the loss
    empties the first. A function traced on Y before it still sums over Y,
    and the emptied set fails on every survivor, saying why."""
    done = run_review_job(tmp_path, "set_ids", ranks, min_np=1)
    assert_every_check_passed(done, ranks - 1)
    assert_survivors_went_on(done, ranks, ranks - 1)
    for rank in range(ranks - 1):
        assert re.search(r"EMPTIED rank=%d .*lost every member" % rank, done.stdout), \
            done.stdout[-3000:]


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_second_loss_during_the_recovery_shrinks_again(tmp_path, when):
    """3 ranks, --min-np 1: rank 2 dies at step 4, and rank 1 dies as the
    survivors start their new engine: before its own starts (rank 0's
    MPI_Comm_dup meets it) or after (rank 0's engine runs on a communicator
    with a dead rank). Rank 0 shrinks again and finishes alone in its own
    process."""
    done = run_review_job(tmp_path, "second_loss", 3, min_np=1, REVIEW_SECOND_LOSS=when)
    assert "shrinking again" in done.stderr, done.stderr[-5000:]
    assert_survivors_went_on(done, 3, 1)
