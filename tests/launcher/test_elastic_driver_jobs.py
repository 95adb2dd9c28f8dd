"""tfringrun's elastic driver in real runs on this host: the cases that end
before or without a restart (below --min-np, a failing discovery script, an
ordinary rank error that must not count as a host loss), and in-process
recovery from a lost rank (in a commit, a step, an XLA step, a shared-memory
allreduce, with process sets, below --min-np). The driver's logic with a fake
launch: tests/unit/test_elastic_driver.py."""
import os
import signal
import subprocess
import sys

import pytest

from conftest import REPO
from conftest import executable_script as script


def tfringrun(*argv, timeout=120):
    env = dict(os.environ, PYTHONPATH=REPO)
    return subprocess.run([sys.executable, "-m", "tf_ring.run"] + list(argv), cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_below_min_np_waits_then_names_the_minimum(tmp_path):
    found = script(tmp_path, "echo localhost:1\n")
    done = tfringrun("-np", "2", "--min-np", "2", "--host-discovery-script", found,
                     "--elastic-timeout", "1.5", sys.executable, "-c", "pass")
    assert done.returncode != 0
    assert "--min-np needs at least 2" in done.stderr and "--elastic-timeout" in done.stderr


def test_discovery_script_failure_is_clear(tmp_path):
    bad = script(tmp_path, "echo cannot reach inventory >&2\nexit 4\n")
    done = tfringrun("-np", "2", "--min-np", "1", "--host-discovery-script", bad,
                     sys.executable, "-c", "pass")
    assert done.returncode != 0 and "exited 4" in done.stderr and "cannot reach inventory" in done.stderr
    garbled = script(tmp_path, "echo 'localhost:two'\n", "garbled.sh")
    done = tfringrun("-np", "2", "--min-np", "1", "--host-discovery-script", garbled,
                     sys.executable, "-c", "pass")
    assert done.returncode != 0 and "localhost:two" in done.stderr and "line 1" in done.stderr


def test_real_rank_exception_fails_without_restart(tmp_path):
    found = script(tmp_path, "echo localhost:2\n")
    code = ("import os, sys\n"
            "if os.environ.get('OMPI_COMM_WORLD_RANK') == '1': raise ValueError('boom')\n")
    done = tfringrun("-np", "2", "--min-np", "2", "--host-discovery-script", found,
                     sys.executable, "-c", code)
    assert done.returncode != 0, done.stderr
    assert "ValueError: boom" in done.stderr and "restarting" not in done.stderr
    assert "job failed with exit code" in done.stderr  # said once the driver knows it is final
    assert done.stderr.count("elastic world") == 1


def run_in_process_job(tmp_path, job, ranks=3, kill_at=5, extra_args=(), **job_env):
    """tfringrun --recovery in-process of tests/elastic_jobs/`job` on this
    machine, `ranks` ranks with --min-np 2, the last rank killed at step
    `kill_at` (kill_plan.py). Discovery names this machine as the ranks do,
    so the killed rank's host is the one blacklisted."""
    jobs = os.path.join(REPO, "tests", "elastic_jobs")
    discover = script(tmp_path, "echo $(uname -n):%d\n" % ranks)
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2",
               COUNTER_KILL_RANK_AT=str(kill_at), COUNTER_MARKER=str(tmp_path / "killed"),
               **job_env)
    return run_job([sys.executable, "-m", "tf_ring.run", "-np", str(ranks), "--min-np", "2",
                    "--host-discovery-script", discover, "--recovery", "in-process",
                    *extra_args, sys.executable, os.path.join(jobs, job)], env)


def run_job(cmd, env, timeout=240):
    """Runs tfringrun in its own session; past `timeout` kills the whole
    session (mpirun and the ranks too, which killing tfringrun alone would
    leave running) and returns what it printed, saying so."""
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        err += "\ntest: the job did not end within %d s" % timeout
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@pytest.mark.parametrize("where", ["in-commit", "in-step", "in-xla-step"])
def test_in_process_recovery_on_one_host(tmp_path, where):
    """The same machine, 3 ranks, no namespaces needed: rank 2 SIGKILLs
    itself at step 5 of the tape job, so the others meet the loss in their
    commit's broadcast, inside their tf.function step (where TensorFlow turns
    the error into an InternalError) or inside an XLA-compiled step; ranks 0
    and 1 go on in the same processes and end with the weights of an
    uninterrupted run."""
    import json
    import re
    import numpy as np
    sys.path.insert(0, os.path.join(REPO, "tests", "elastic_jobs"))
    import tape_data
    done = run_in_process_job(tmp_path, "tape_job.py",
                              TAPE_KILL_INSIDE_STEP="0" if where == "in-commit" else "1",
                              TAPE_JIT="1" if where == "in-xla-step" else "0")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert "recovered in-process and finished" in done.stderr
    assert "tf_ring lost a rank (rank 2 of the old world)" in done.stderr
    starts = re.findall(r"START rank=(\d) size=(\d) step=(\d+) pid=(\d+)", done.stdout)
    before = {r: pid for r, size, _, pid in starts if size == "3"}
    after = {r: pid for r, size, _, pid in starts if size == "2"}
    assert sorted(after) == ["0", "1"] and all(after[r] == before[r] for r in after), starts
    ends = re.findall(r"END rank=\d size=2 step=\d+ w=(.*)", done.stdout)
    assert len(ends) == 2, done.stdout
    for weights in ends:
        assert np.allclose(json.loads(weights), tape_data.reference_weights(), atol=1e-5)


def test_in_process_recovery_renumbers_the_process_sets(tmp_path):
    """Sets {0,1}, {0,2}, {1,2} on 3 ranks; rank 2 dies at step 5. The
    survivors' sets become [0, 1], [0] and [1] (the same objects), and every
    later step's allreduce in each set sums to the set's new size."""
    done = run_in_process_job(tmp_path, "counter_job.py", COUNTER_SETS="1")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert "recovered in-process and finished" in done.stderr
    for rank in (0, 1):
        assert "SETS rank=%d [[0, 1], [0], [1]]" % rank in done.stdout, done.stdout[-3000:]
        assert "END rank=%d size=2 step=30 total=%d" % (rank, sum(range(30))) in done.stdout


# Each path's barriers per 64 MB allreduce: the staged one pinned to 4 MiB
# chunks (two barriers per chunk), and single-copy reads (three in all). The
# path is pinned because by default it follows the measured cores.
SHM_LOSS_PATHS = {
    "staged": ({"TF_RING_SHM_SINGLE_COPY": "0", "TF_RING_SHM_CHUNK_BYTES": str(4 << 20)}, 32),
    "single_copy": ({"TF_RING_SHM_SINGLE_COPY": "1"}, 3),
}


@pytest.mark.parametrize("path", sorted(SHM_LOSS_PATHS))
@pytest.mark.parametrize("ranks", [2, 3])
def test_a_rank_lost_inside_a_shared_memory_allreduce(tmp_path, ranks, path):
    """In-process mode keeps the shared-memory allreduce. The last rank dies
    in the middle of step 4's 64 MB one (tests/elastic_jobs/shm_loss_job.py),
    staged or read directly, when its peers wait for it in the segment, not
    in an MPI call: they see its process gone, leave, recover in the same
    processes and finish with the sums checked on every step."""
    import re
    jobs = os.path.join(REPO, "tests", "elastic_jobs")
    discover = script(tmp_path, "echo $(uname -n):%d\n" % ranks)
    settings, barriers = SHM_LOSS_PATHS[path]
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2", **settings,
               # die half-way through step 4's allreduce
               TF_RING_TEST_DIE_AT_SHM_BARRIER="%d:%d" % (ranks - 1, 4 * barriers + barriers // 2 + 1))
    done = run_job([sys.executable, "-m", "tf_ring.run", "-np", str(ranks), "--min-np", "1",
                    "--host-discovery-script", discover, "--recovery", "in-process",
                    sys.executable, os.path.join(jobs, "shm_loss_job.py")], env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert re.search(r"local rank %d \(rank %d, pid \d+\) died while the others waited for it "
                     r"in shared memory" % (ranks - 1, ranks - 1), done.stderr), done.stderr[-5000:]
    starts = re.findall(r"START rank=(\d) size=(\d) step=\d+ pid=(\d+)", done.stdout)
    before = {r: pid for r, size, pid in starts if size == str(ranks)}
    after = {r: pid for r, size, pid in starts if size == str(ranks - 1)}
    assert sorted(after) == [str(r) for r in range(ranks - 1)], starts
    assert all(after[r] == before[r] for r in after), starts
    for rank in range(ranks - 1):
        assert "END rank=%d size=%d step=7 total=21" % (rank, ranks - 1) in done.stdout, \
            done.stdout[-3000:]


# allgather: the engine's [2, 2] output does not fit the compiled [3, 2].
# alltoall: the compiled equal splits hold 3 entries for 2 ranks.
# reducescatter: 3 rows over 2 ranks give rank 0 two rows where [1, 2] was
# compiled; rank 1's single row fits, and it is told rank 0 refused.
STALE_MESSAGES = {"allgather": "[2, 2] is not the [3, 2]",
                  "alltoall": "splits on rank 0 have 3 entries, expected one per rank (2)",
                  "reducescatter": "rank 0 could not take its output"}


@pytest.fixture(scope="module")
def compiled_shrink_job(tmp_path_factory):
    """One job for the three ops (each one's failure is its own): they share
    its start-up and its recovery."""
    return run_in_process_job(tmp_path_factory.mktemp("xla_shrink"), "xla_shrink_job.py",
                              kill_at=3)


@pytest.mark.parametrize("op", ["allgather", "alltoall", "reducescatter"])
def test_a_compiled_collective_after_a_shrink(compiled_shrink_job, op):
    """XLA bakes the set's size into a compiled allgather, alltoall or
    reducescatter. After rank 2 is lost, the function compiled for 3 ranks,
    called with the input it was compiled for, fails on both survivors with
    an InvalidArgumentError naming the tensor (no hang, no wrong shape), and
    the one the reset callback traced again gives the 2-rank result."""
    done = compiled_shrink_job
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    for rank in (0, 1):
        stale = [l for l in done.stdout.splitlines() if l.startswith("STALE op=%s rank=%d " % (op, rank))]
        assert len(stale) == 1 and "InvalidArgumentError" in stale[0], done.stdout[-3000:]
        assert "'xla.shrink.%s'" % op in stale[0] and STALE_MESSAGES[op] in stale[0], stale
        assert "END rank=%d size=2 step=6" % rank in done.stdout, done.stdout[-3000:]


def test_in_process_below_min_np_fails_naming_the_minimum(tmp_path):
    """2 ranks, --min-np 2: rank 1 is killed, the survivor alone is below the
    minimum, so it exits for a relaunch, and with no other host the driver
    gives up after --elastic-timeout naming the minimum."""
    done = run_in_process_job(tmp_path, "tape_job.py", ranks=2, kill_at=3,
                              extra_args=["--elastic-timeout", "3"])
    assert done.returncode != 0, done.stderr[-5000:]
    assert "--min-np needs at least 2, waited 3 s (--elastic-timeout)" in done.stderr, \
        done.stderr[-5000:]
    assert "END" not in done.stdout
