"""Shared helpers: launching a pytest file on N real processes under tfringrun."""
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

import allowed_skips
import rank_summaries

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The files the ranks run (mpi_*.py): the parallel tier's tests start them.
PARALLEL_DIR = os.path.join(REPO, "tests", "parallel", "ranks")

# The ranks' folders have conftests of their own (tf_ring initialised for the
# whole session, a failure ending the job): never collected by the tests'
# own run, only named directly by the launcher's (multihost/ranks' under
# simulated hosts).
collect_ignore = ["parallel/ranks", "multihost/ranks"]


# Tests that check a job left no process behind look for their own job's
# processes only (other jobs may run on the machine, this suite among them):
# every process the job starts inherits this variable with a value unique to
# the test, through mpirun's re-parenting and new sessions alike.
MARKER_VAR = "TF_RING_TEST_JOB"


# The whole suite runs on two pytest workers, a file to a worker
# (README: -n 2 --dist loadfile --no-loadscope-reorder), handed out in this
# order: the tiers whose files run longest first, so no long file starts
# last and runs alone, and the many short in-process files fill the gaps at
# the end. Multi-host tests mostly wait (for a detection, a restart, a JVM),
# so the other worker's CPU-bound jobs use those cores meanwhile.
# The longest files (measured: docs/testing.md) go out before their tiers.
TIER_ORDER = ("parallel", "integration", "builds", "multihost", "launcher", "gpu", "unit")
LONGEST_FILES = ("parallel/test_parallel.py", "integration/test_spark.py",
                 "multihost/test_elastic_loss.py")


def _hand_out_rank(item):
    path = os.path.relpath(str(item.fspath), os.path.join(REPO, "tests"))
    if path in LONGEST_FILES:
        return LONGEST_FILES.index(path)
    tier = path.split(os.sep)[0]
    return len(LONGEST_FILES) + (TIER_ORDER.index(tier) if tier in TIER_ORDER else len(TIER_ORDER))


def pytest_collection_modifyitems(config, items):
    items.sort(key=_hand_out_rank)  # stable: each file's tests stay together, in order


def _whole_suite_or_ci(config):
    """The skip check's scope: the whole suite (the README's command names
    tests/), or any run with CI=true; never inside a rank's own pytest."""
    if os.environ.get(rank_summaries.SUMMARY_VAR) or rank_summaries.this_rank() >= 0:
        return False
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        return True
    where = str(config.invocation_params.dir)
    named = {os.path.abspath(os.path.join(where, str(a).split("::")[0])) for a in config.args}
    return bool(named & {os.path.join(REPO, "tests"), REPO})


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    stats = reporter.stats if reporter is not None else {}
    if os.environ.get(rank_summaries.SUMMARY_VAR) == "1":
        # A rank under a launching test (rank_summaries.py): one line with its counts.
        line = rank_summaries.summary_line(rank_summaries.summary_of(stats, rank_summaries.this_rank()))
        sys.stdout.flush()
        os.write(1, ("\n%s\n" % line).encode())
        return
    if hasattr(config, "workerinput") or not _whole_suite_or_ci(config):
        return  # an xdist worker: the controller sees every worker's reports
    skips = rank_summaries.summary_of(stats, -1)["skips"]
    config._tf_ring_unexpected_skips = allowed_skips.unexpected(skips)
    if config._tf_ring_unexpected_skips and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    unexpected = getattr(config, "_tf_ring_unexpected_skips", None)
    if unexpected:
        terminalreporter.section("unexpected skips: this run fails", sep="=", red=True, bold=True)
        terminalreporter.line(
            "Only the tests in tests/allowed_skips.py may skip in a whole run or under CI=true "
            "(docs/testing.md). These skipped:")
        for nodeid, reason in unexpected:
            terminalreporter.line("  %s: %s" % (nodeid, reason))


def job_marker():
    """A new marker value; pass {MARKER_VAR: marker} in the job's environment."""
    return uuid.uuid4().hex


def processes_marked(marker):
    """Pids of this machine's live processes whose environment holds `marker`."""
    needle = ("%s=%s" % (MARKER_VAR, marker)).encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % entry, "rb") as f:
                if needle in f.read().split(b"\0"):
                    pids.append(int(entry))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return pids


def marked_processes_left(marker, within=15):
    """Waits up to `within` s for the marked processes to end (exiting ones
    take a moment); returns those still there."""
    deadline = time.monotonic() + within
    while processes_marked(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    return processes_marked(marker)


def executable_script(tmp_path, text, name="discover.sh"):
    """A /bin/sh script (a host discovery script, a fake agent) in tmp_path; its path."""
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(0o755)
    return str(path)


def tfringrun_cmd(np, *command):
    """Launcher flags may lead `command` (e.g. "--verbose")."""
    return [sys.executable, "-m", "tf_ring.run", "-np", str(np)] + list(command)


def run_under_launcher(np, command, timeout=600, env=None, cwd=REPO):
    """Runs `command` on `np` ranks; returns the CompletedProcess. On timeout
    the whole job (launcher, mpirun, ranks) is killed, never left behind."""
    full_env = dict(os.environ)
    full_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    full_env.update(env or {})
    proc = subprocess.Popen(tfringrun_cmd(np, *command), cwd=cwd, env=full_env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # mpirun may give ranks their own process groups; the session holds all.
        subprocess.run(["pkill", "-KILL", "-s", str(proc.pid)], check=False)
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail("job timed out after %d s (killed)\n--- stdout ---\n%s\n--- stderr ---\n%s"
                    % (timeout, out[-8000:], err[-8000:]))
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def rank_pytest_command(*args):
    """pytest on a rank, for the ranks' files (mpi_*.py): the suite's addopts
    dropped, stopping at the first failure."""
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
            "-o", "python_files=mpi_*.py", "-x"] + list(args)


def run_ranks_pytest(np, command, timeout=600, env=None, what="the job"):
    """Runs `command` (tfringrun's flags, then rank_pytest_command's) on `np`
    ranks. Fails with all ranks' output unless the job succeeded and every
    rank ran the same tests, all passing; skips with the ranks' reasons if
    they skipped any (tests/rank_summaries.py)."""
    result = run_under_launcher(np, command, timeout=timeout,
                                env=dict(env or {}, **{rank_summaries.SUMMARY_VAR: "1"}))
    if result.returncode != 0:
        pytest.fail("%s failed under %d ranks (exit %d)\n--- stdout ---\n%s\n--- stderr ---\n%s"
                    % (what, np, result.returncode, result.stdout[-20000:],
                       result.stderr[-8000:]))
    rank_summaries.check_ranks(result.stdout, np)
    return result


def run_parallel_pytest(path, np, timeout=600, env=None, extra=(), launcher_args=()):
    """Runs one pytest file on every rank, as run_ranks_pytest judges it.
    `extra` goes to pytest (more files, options), `launcher_args` to tfringrun (hosts)."""
    return run_ranks_pytest(np, list(launcher_args) + rank_pytest_command(path, *extra),
                            timeout=timeout, env=env, what=os.path.basename(path))
