"""The quick tier stays quick: a test here runs in this process (a short
helper process is fine) and never starts a job. Starting tfringrun with
ranks, mpirun, a Spark or Ray driver, or a build fails the test at once,
saying which tier it belongs in (docs/testing.md)."""
import os
import subprocess

import pytest

# Programs whose run is a job (or a build), and the tier that runs them.
_JOB_PROGRAMS = {"mpirun": "launcher", "mpiexec": "launcher", "prterun": "launcher",
                 "orterun": "launcher", "tfringrun": "launcher", "g++": "builds",
                 "c++": "builds", "nvcc": "builds"}
# tfringrun's (and mpirun's) answers that start nothing.
_NO_JOB_FLAGS = {"--help", "-h", "--version", "--check-build"}


def refusal(argv):
    """Why `argv` has no place in the quick tier, or None if it has one."""
    words = [str(w) for w in (argv if isinstance(argv, (list, tuple)) else str(argv).split())]
    if not words:
        return None
    program = os.path.basename(words[0])
    launcher = program in ("mpirun", "mpiexec", "prterun", "orterun", "tfringrun") or \
        any(words[i:i + 2] == ["-m", "tf_ring.run"] for i in range(len(words)))
    if launcher:
        # The launcher's own options: those after "-m tf_ring.run" (Python's
        # before it, such as -P, say nothing about a job).
        module = [i for i in range(len(words)) if words[i:i + 2] == ["-m", "tf_ring.run"]]
        first = module[0] + 2 if module else 1
        options = {w for w in words[first:] if w.startswith("-")}
        if options and options <= _NO_JOB_FLAGS:
            return None
        return "it starts a job (%s): tests/launcher or tests/parallel" % " ".join(words[:6])
    if program in _JOB_PROGRAMS:
        return "it runs %s: tests/%s" % (program, _JOB_PROGRAMS[program])
    joined = " ".join(words)
    for marker, tier in (("pip wheel", "builds"), ("pip install", "builds"),
                         ("setup.py", "builds"), ("build.sh", "builds"),
                         ("spark_jobs", "integration"), ("ray_jobs", "integration")):
        if marker in joined:
            return "it runs %s: tests/%s" % (marker, tier)
    return None


@pytest.fixture(autouse=True)
def _no_jobs_in_the_quick_tier(monkeypatch):
    start = subprocess.Popen.__init__

    def guarded(self, args, *rest, **kwargs):
        why = refusal(args)
        if why:
            raise AssertionError("tests/unit runs no job, but this test does: %s" % why)
        return start(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", guarded)
