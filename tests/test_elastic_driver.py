"""tfringrun's elastic driver: the restart loop with a fake launch (no
processes), and real tfringrun runs for the cases that end before or without
a restart (below --min-np, a failing discovery script, an ordinary rank
error that must not count as a host loss)."""
import os
import signal
import subprocess
import sys

import pytest

from tf_ring.elastic_driver import driver as elastic_driver
from tf_ring.run import arguments, launcher
from tf_ring.elastic_driver import elastic_plan
from tf_ring.plumbing.env_names import EXIT_HOSTS_UPDATED
from tf_ring.plumbing.job_settings import ElasticSettings, JobSettings, WorldSettings

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def script(tmp_path, text, name="discover.sh"):
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(0o755)
    return str(path)


def driver_args(tmp_path, lines, **over):
    """The JobSettings of an elastic job; `over`: its ElasticSettings' fields."""
    elastic = dict(min_np=2, discovery_script=script(tmp_path, lines), elastic_timeout=0.0)
    elastic.update(over)
    return JobSettings(command=["true"], np=2, detection_timeout=10.0,
                       elastic=ElasticSettings(**elastic))


def test_loss_blacklists_the_host_and_restarts_smaller(tmp_path, capsys):
    args = driver_args(tmp_path, "echo a:2\necho b:1\n")
    worlds, results = [], [(1, {"b"}), (0, set())]

    def launch(world, env):
        worlds.append((world.np, world.hosts))
        assert os.environ.get("TF_RING_ELASTIC_SECRET") is None and env["TF_RING_ELASTIC_SECRET"]
        return results.pop(0)

    assert elastic_driver.Driver(args, {}, launch, sleep=lambda s: None).run() == 0
    assert worlds == [(3, "a:2,b:1"), (2, "a:2")]


def test_hosts_updated_exit_relaunches_and_reset_limit_caps(tmp_path, capsys):
    args = driver_args(tmp_path, "echo a:3\n", max_np=2, reset_limit=1)
    calls = []

    def launch(world, env):
        calls.append(world.np)
        return EXIT_HOSTS_UPDATED, set()

    rc = elastic_driver.Driver(args, {}, launch, sleep=lambda s: None).run()
    assert rc == EXIT_HOSTS_UPDATED and calls == [2, 2]
    assert "--reset-limit 1" in capsys.readouterr().err


def test_ordinary_failure_is_not_a_host_loss(tmp_path):
    args = driver_args(tmp_path, "echo a:2\n")
    calls = []

    def launch(world, env):
        calls.append(world.np)
        return 1, set()

    assert elastic_driver.Driver(args, {}, launch).run() == 1 and calls == [2]


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


def test_elastic_flags_need_a_host_source_and_sane_bounds():
    with pytest.raises(SystemExit):
        arguments.parse_args(["-np", "2", "--min-np", "2", "python", "x.py"], environ={})
    with pytest.raises(SystemExit):
        arguments.parse_args(["-np", "2", "--min-np", "3", "--max-np", "2",
                             "--host-discovery-script", "true", "python", "x.py"], environ={})
    plain = arguments.parse_args(["-np", "2", "python", "x.py"], environ={})
    assert not plain.is_elastic


@pytest.mark.parametrize("lost, rc, says_failed", [(["simhost2"], 14, False),
                                                   ([], EXIT_HOSTS_UPDATED, False),
                                                   ([], 1, True)])
def test_only_a_world_that_is_not_restarted_says_the_job_failed(monkeypatch, capsys, lost, rc,
                                                                says_failed):
    """A world ending in a restart (ranks lost, hosts added) must not print
    "job failed" before the driver's "restarting"; an ordinary failure must."""
    monkeypatch.setattr(launcher, "build_command", lambda *a, **k: ["mpirun"])
    monkeypatch.setattr(launcher, "_run_job", lambda *a, **k: rc)
    monkeypatch.setattr(launcher.elastic_plan, "judge_world", lambda *a, **k: (rc, set(lost)))
    world = WorldSettings(JobSettings(command=["true"], np=2), 2, [("localhost", 2)])
    assert launcher._run_world(world, {}, "token", None) == (rc, set(lost))
    said = "job failed with exit code %d" % rc in capsys.readouterr().err
    assert said == says_failed


def test_in_process_recovery_adds_ulfm_to_mpirun_and_the_ranks_env(tmp_path):
    args = arguments.parse_args(["-np", "3", "--min-np", "2", "--recovery", "in-process",
                                "--host-discovery-script", "true", "python", "x.py"], environ={})
    assert args.in_process
    assert "--with-ft ulfm --mca btl tcp,self --mca coll_han_priority 0" in args.mpi_args
    assert "--mca mpi_ft_detector true --mca mpi_ft_detector_timeout 10 " in args.mpi_args
    plain = arguments.parse_args(["-np", "3", "--min-np", "2", "--host-discovery-script", "true",
                                 "python", "x.py"], environ={})
    assert not plain.in_process and "ulfm" not in plain.mpi_args
    envs = []

    def launch(world, env):
        envs.append(env)
        return 0, {"c"}  # a rank on c died; the rest finished in-process

    lines = driver_args(tmp_path, "echo a\necho b\necho c\n", recovery="in-process")
    assert elastic_driver.Driver(lines, {}, launch, sleep=lambda s: None).run() == 0
    assert envs[0]["TF_RING_ULFM"] == "1" and envs[0]["TF_RING_ELASTIC_MIN_NP"] == "2"
    assert len(envs) == 1  # no relaunch
    restart = driver_args(tmp_path, "echo a\necho b\necho c\n")
    calls = []
    assert elastic_driver.Driver(restart, {}, lambda w, e: calls.append(w.np) or (
        (1, {"c"}) if len(calls) == 1 else (0, set())), sleep=lambda s: None).run() == 0
    assert calls == [3, 2]  # the restart mode relaunches smaller


def test_ranks_beat_when_a_detection_timeout_is_given():
    """Restart mode and plain jobs with --detection-timeout S: every rank's
    wrapper reports a beat every S / 3.5 s, and the launcher declares a host
    lost after S s without one. Restart mode beats by default (120 s); a
    plain job without the flag does not (a saturated link can delay beats,
    and there a wrongly lost host ends the job); in-process mode has Open
    MPI's detector instead; with --output the launcher cannot read the
    ranks' stderr."""
    def wrapper_of(argv):
        args = arguments.parse_args(argv + ["python", "x.py"], environ={})
        cmd = launcher.build_command(args, cores=4)
        return launcher._beat_interval(args), cmd[cmd.index("tfringrun-rank") - 1]
    elastic = ["-np", "3", "--min-np", "2", "--host-discovery-script", "true"]
    for argv in (elastic + ["--detection-timeout", "7"], ["-np", "2", "--detection-timeout", "7"]):
        beat, wrapper = wrapper_of(argv)
        assert beat == 2.0 and "sleep 2 " in wrapper and " beat $r" in wrapper
    beat, wrapper = wrapper_of(elastic)  # restart mode's default
    assert beat == 120 / 3.5 and " beat $r" in wrapper
    assert arguments.parse_args(elastic + ["python", "x.py"], environ={}).detection_timeout == 120
    for argv in (["-np", "2"], elastic + ["--recovery", "in-process"],
                 ["-np", "2", "--detection-timeout", "7", "--mpi-args", "--output-filename /tmp/x"]):
        beat, wrapper = wrapper_of(argv)
        assert beat is None and " beat " not in wrapper
    with pytest.raises(SystemExit):
        arguments.parse_args(["-np", "2", "--detection-timeout", "0", "python", "x.py"], environ={})


def test_an_in_process_world_is_judged_by_its_survivors():
    host_of = {0: "a", 1: "b", 2: "c"}.get
    judge = elastic_plan.judge_in_process_world
    # Rank 2 killed, the others finished: done, c lost.
    ended = {2: ("exit", 137), 0: ("exit", 0), 1: ("exit", 0)}
    assert judge(ended, [2, 0, 1], [], [], host_of) == (0, {"c"})
    # Rank 2's host vanished (no report): lost all the same.
    assert judge({0: ("exit", 0), 1: ("exit", 0)}, [0, 1], [2], [], host_of) == (0, {"c"})
    # Too few left: the survivors ask for a relaunch.
    ended = {2: ("exit", 137), 0: ("exit", EXIT_HOSTS_UPDATED), 1: ("exit", EXIT_HOSTS_UPDATED)}
    assert judge(ended, [2, 0, 1], [], [], host_of) == (EXIT_HOSTS_UPDATED, {"c"})
    # Hosts were added: the first rank to leave with 75 makes mpirun stop the rest.
    ended = {0: ("exit", EXIT_HOSTS_UPDATED), 1: ("stopped", 143), 2: ("stopped", 143)}
    assert judge(ended, [0, 1, 2], [], [], host_of) == (EXIT_HOSTS_UPDATED, set())
    # ... or killed them before they could report (seen on the simulated hosts).
    assert judge({1: ("exit", EXIT_HOSTS_UPDATED)}, [1], [0], [], host_of) == \
        (EXIT_HOSTS_UPDATED, set())
    # A lost host's daemon took mpirun's job down: the others were stopped.
    ended = {0: ("stopped", 143), 1: ("stopped", 143)}
    assert judge(ended, [0, 1], [2], ["c"], host_of) == (1, {"c"})
    # A survivor's own bug is an ordinary failure: no host blamed.
    ended = {2: ("exit", 137), 0: ("exit", 1), 1: ("exit", 0)}
    assert judge(ended, [2, 0, 1], [], [], host_of) == (1, set())


def test_a_shrink_below_min_np_blames_the_silent_ranks_when_every_survivor_left():
    host_of = {0: "a", 1: "b", 2: "c", 3: "c"}.get
    judge = elastic_plan.judge_in_process_world
    # Rank 2's host vanished silently; the 2 ranks the shrink kept (0 and 1)
    # both left for a relaunch: rank 2 is the lost one, and host c with it.
    ended = {0: ("exit", EXIT_HOSTS_UPDATED), 1: ("exit", EXIT_HOSTS_UPDATED)}
    assert judge(ended, [0, 1], [2], [], host_of, np=3, shrunk_to=2) == (EXIT_HOSTS_UPDATED, {"c"})
    # mpirun stopped a survivor before it said: the leavers cannot be told
    # from the lost, so nobody is blamed (the restart finds out again).
    ended = {0: ("exit", EXIT_HOSTS_UPDATED), 1: ("stopped", 143)}
    assert judge(ended, [0, 1], [2], [], host_of, np=3, shrunk_to=2) == (EXIT_HOSTS_UPDATED, set())
    # No shrink: hosts were added, and the silent ranks were only stopped.
    ended = {0: ("exit", EXIT_HOSTS_UPDATED), 1: ("exit", EXIT_HOSTS_UPDATED)}
    assert judge(ended, [0, 1], [2], [], host_of, np=3, shrunk_to=None) == (EXIT_HOSTS_UPDATED, set())
    # A host keeps its place while a survivor is on it (rank 3 lost, 2 kept).
    ended = {r: ("exit", EXIT_HOSTS_UPDATED) for r in (0, 1, 2)}
    assert judge(ended, [0, 1, 2], [3], [], host_of, np=4, shrunk_to=3) == (EXIT_HOSTS_UPDATED, set())


def test_the_ranks_no_shrink_kept_are_lost_even_when_the_world_split():
    host_of = {0: "a", 1: "b", 2: "c", 3: "c"}.get
    judge = elastic_plan.judge_in_process_world
    # Seen in CI: rank 2's link went down and ULFM left ranks 0 and 1 each in
    # a world of one (both reported, {0} and {1}); only rank 1's exit reached
    # the launcher. Counting leavers blamed a; the reports clear a and b.
    ended = {1: ("exit", EXIT_HOSTS_UPDATED)}
    assert judge(ended, [1], [0, 2], [], host_of, np=3, shrunk_to=2,
                 survivors={0, 1}) == (EXIT_HOSTS_UPDATED, {"c"})
    # A survivor stopped by mpirun before it said: the report still names it.
    ended = {0: ("exit", EXIT_HOSTS_UPDATED), 1: ("stopped", 143)}
    assert judge(ended, [0, 1], [2], [], host_of, np=4, shrunk_to=2,
                 survivors={0, 1}) == (EXIT_HOSTS_UPDATED, {"c"})
    # A host keeps its place while a survivor is on it.
    assert judge(ended, [0, 1], [2, 3], [], host_of, np=4, shrunk_to=3,
                 survivors={0, 1, 2}) == (EXIT_HOSTS_UPDATED, set())
    # Nobody lost: hosts were added, and the stopped ranks are not blamed.
    assert judge(ended, [0, 1], [2], [], host_of, np=3, shrunk_to=3,
                 survivors={0, 1, 2}) == (EXIT_HOSTS_UPDATED, set())


@pytest.mark.parametrize("shrunk, says", [
    (None, "hosts were added; restarting"),
    (1, "ranks were lost and the 1 left are fewer than --min-np 2; restarting"),
    (2, "hosts were added (after ranks were lost: 2 of 3 left); restarting"),
])
def test_the_driver_says_why_ranks_asked_for_a_relaunch(tmp_path, capsys, shrunk, says):
    args = driver_args(tmp_path, "echo a:1\necho b:1\necho c:1\n", recovery="in-process")
    results = [(EXIT_HOSTS_UPDATED, set()), (0, set())]

    def launch(world, env):
        if shrunk is not None and len(results) == 2:
            world.control._world_size = shrunk  # as rank 0 reports it after a shrink
        return results.pop(0)

    assert elastic_driver.Driver(args, {}, launch, sleep=lambda s: None).run() == 0
    assert says in capsys.readouterr().err


def test_mpirun_is_stopped_only_when_the_shrunk_world_has_ended():
    done = elastic_plan.survivors_finished
    assert not done({2: ("exit", 137), 0: ("exit", 0)}, 2)
    assert done({2: ("exit", 137), 0: ("exit", 0), 1: ("exit", 0)}, 2)
    assert not done({2: ("exit", 137), 0: ("exit", 0), 1: ("exit", 0)}, 3)


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


@pytest.mark.parametrize("op", ["allgather", "alltoall", "reducescatter"])
def test_a_compiled_collective_after_a_shrink(tmp_path, op):
    """XLA bakes the set's size into a compiled allgather, alltoall or
    reducescatter. After rank 2 is lost, the function compiled for 3 ranks,
    called with the input it was compiled for, fails on both survivors with
    an InvalidArgumentError naming the tensor (no hang, no wrong shape), and
    the one the reset callback traced again gives the 2-rank result."""
    done = run_in_process_job(tmp_path, "xla_shrink_job.py", kill_at=3, XLA_SHRINK_OP=op)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    for rank in (0, 1):
        stale = [l for l in done.stdout.splitlines() if l.startswith("STALE rank=%d " % rank)]
        assert len(stale) == 1 and "InvalidArgumentError" in stale[0], done.stdout[-3000:]
        assert "'xla.shrink'" in stale[0] and STALE_MESSAGES[op] in stale[0], stale
        assert "END rank=%d size=2 step=6" % rank in done.stdout, done.stdout[-3000:]


# allgather: the engine's [2, 2] output does not fit the compiled [3, 2].
# alltoall: the compiled equal splits hold 3 entries for 2 ranks.
# reducescatter: 3 rows over 2 ranks give rank 0 two rows where [1, 2] was
# compiled; rank 1's single row fits, and it is told rank 0 refused.
STALE_MESSAGES = {"allgather": "[2, 2] is not the [3, 2]",
                  "alltoall": "splits on rank 0 have 3 entries, expected one per rank (2)",
                  "reducescatter": "rank 0 could not take its output"}


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


def test_only_a_lost_rank_error_counts_as_one():
    import tensorflow as tf
    from tf_ring.elastic import in_process
    text = "tf_ring lost a rank (rank 2 of the old world): its process or host is gone."
    assert in_process.is_lost_rank_error(tf.errors.UnavailableError(None, None, text))
    assert in_process.is_lost_rank_error(RuntimeError(text))  # the engine binding's form
    assert in_process.is_lost_rank_error(tf.errors.InternalError(None, None, text))  # tf.function
    assert not in_process.is_lost_rank_error(tf.errors.UnavailableError(None, None, "socket"))
    assert not in_process.is_lost_rank_error(ValueError(text))  # the program's own error
