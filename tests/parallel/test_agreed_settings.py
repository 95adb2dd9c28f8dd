"""Engine settings set differently on one rank: every rank runs with rank 0's.

tests/jobs/differing_settings.py sets TF_RING_* variables in one rank's
environment only, scenario by scenario, and checks collective results and
the engine's reported parameters on every rank; this test checks that the
job ends cleanly and that exactly the differing ranks warned, naming the
variable, their value and rank 0's."""
import importlib.util
import os
import re
import sys

import pytest

from conftest import REPO, run_under_launcher

JOB = os.path.join(REPO, "tests", "jobs", "differing_settings.py")
# tf_ring's own library, driven without TensorFlow (found without importing it).
NATIVE_LIBRARY = os.path.join(importlib.util.find_spec("tf_ring").submodule_search_locations[0],
                              "_tf_ring.so")
SCENARIOS = ("fusion", "fusion_rank0", "cache", "shm", "chunk", "cycle", "hierarchical",
             "hierarchical_off", "autotune", "dynamic", "rank0_only")

# (who warns, what the warning says before "; this rank uses rank 0's value"):
# "last" is the last rank, whose environment differs; "others" every rank
# but 0, when rank 0's differs.
WARNINGS = [
    ("last", 'TF_RING_FUSION_THRESHOLD is "0" on this rank but unset (default 67108864) on rank 0'),
    ("others", 'TF_RING_FUSION_THRESHOLD is unset (default 67108864) on this rank but "0" on rank 0'),
    ("last", 'TF_RING_CACHE_CAPACITY is "2" on this rank but unset (default 1024) on rank 0'),
    ("last", 'TF_RING_SHM is "0" on this rank but unset (default 1) on rank 0'),
    ("last", 'TF_RING_SHM_CHUNK_BYTES is "4096" on this rank but unset (default 4194304) on '
             'rank 0'),
    ("last", 'TF_RING_CYCLE_TIME is "7" on this rank but unset (default 0) on rank 0'),
    ("last", 'TF_RING_HIERARCHICAL is "sideways" on this rank but unset (default auto) on rank 0'),
    ("last", 'TF_RING_HIERARCHICAL is "0" on this rank but unset (default auto) on rank 0'),
    ("last", 'TF_RING_AUTOTUNE is "1" on this rank but unset (default 0) on rank 0'),
    ("others", 'TF_RING_DYNAMIC_PROCESS_SETS is unset (default 0) on this rank but "1" on rank 0'),
    ("last", 'TF_RING_STALL_CHECK_TIME_SECONDS is "0" on this rank but unset (default 60) on '
             'rank 0'),
    ("last", 'TF_RING_STALL_SHUTDOWN_TIME_SECONDS is "5" on this rank but unset (default 0) on '
             'rank 0'),
    ("last", 'TF_RING_TIMELINE_MARK_CYCLES is "1" on this rank but unset (default 0) on rank 0'),
    ("last", 'TF_RING_AUTOTUNE_WARMUP_SAMPLES is "4" on this rank but unset (default 1) on rank 0'),
]
SUFFIX = "; this rank uses rank 0's value, as every rank must run with the same engine settings."
WARNING_LINE = re.compile(r"tf_ring rank (\d+) WARNING\] (TF_RING_\S+ is .* on rank 0)(;.*)$")


def run_job(np, monkeypatch, scenarios=SCENARIOS, launcher_args=()):
    # The job's expectations start from no TF_RING_* settings at all.
    for name in list(os.environ):
        if name.startswith("TF_RING_") and name != "TF_RING_LOG_LEVEL":
            monkeypatch.delenv(name)
    env = {"TF_RING_LOG_LEVEL": "warning", "TF_RING_ENGINE_LIB": NATIVE_LIBRARY,
           "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])}
    result = run_under_launcher(np, list(launcher_args) + [sys.executable, JOB] + list(scenarios),
                                timeout=240, env=env)
    assert result.returncode == 0, "exit %d\n--- stdout ---\n%s\n--- stderr ---\n%s" % (
        result.returncode, result.stdout[-6000:], result.stderr[-6000:])
    for rank in range(np):
        for scenario in scenarios:
            assert "rank %d: %s: ok" % (rank, scenario) in result.stdout.splitlines(), \
                (rank, scenario, result.stdout[-3000:])
    return result


def check_warnings(np, stderr, expected=WARNINGS):
    said = []
    for line in stderr.splitlines():
        found = WARNING_LINE.search(line)
        if found:
            assert found.group(3) == SUFFIX, line
            said.append((int(found.group(1)), found.group(2)))
    want = []
    for who, text in expected:
        want += [(rank, text) for rank in (range(1, np) if who == "others" else [np - 1])]
    # Exactly these: rank 0 never warns, and with 3 ranks rank 1 (which
    # shares rank 0's environment) warns only where rank 0's differs.
    assert sorted(said) == sorted(want), stderr[-6000:]


@pytest.mark.parametrize("np", [2, 3])
def test_every_rank_runs_with_rank_0s_settings(np, monkeypatch):
    result = run_job(np, monkeypatch)
    check_warnings(np, result.stderr)
