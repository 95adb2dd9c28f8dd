"""The tests keep their tiers (docs/testing.md): every test file lives in a
tier's folder, the quick tier names none of the helpers that start jobs, and
its guard (tests/unit/conftest.py) refuses a job before anything starts."""
import os
import re
import subprocess

import pytest

from conftest import REPO
from unit.conftest import refusal

TESTS = os.path.join(REPO, "tests")
# Tier folder -> what runs there.
TIERS = {"unit": "in this process", "builds": "builds of this tree",
         "launcher": "tfringrun jobs on this host", "parallel": "the ranks' files on 2 and 3 ranks",
         "multihost": "simulated hosts", "integration": "Spark and Ray",
         "gpu": "the GPU machine (tests/gpu/run_on_device.sh)"}
LAUNCHING_HELPERS = re.compile(r"\b(run_under_launcher|run_parallel_pytest|tfringrun_cmd|"
                               r"SimulatedHosts|simulated_hosts|run_spark_driver)\b")


def _test_files():
    for where, folders, names in os.walk(TESTS):
        folders[:] = [f for f in folders if f != "__pycache__"]
        for name in names:
            if name.startswith("test_") and name.endswith(".py"):
                yield os.path.relpath(os.path.join(where, name), TESTS)


def test_every_test_file_is_in_a_tier():
    files = list(_test_files())
    assert len(files) > 50
    outside = [f for f in files if f.split(os.sep)[0] not in TIERS]
    assert outside == [], "put these in one of tests/%s" % ", tests/".join(TIERS)


def test_the_quick_tier_names_no_helper_that_starts_a_job():
    unit = os.path.join(TESTS, "unit")
    named = {}
    for name in sorted(os.listdir(unit)):
        if name.endswith(".py") and name not in ("conftest.py", "test_tiers.py"):
            found = LAUNCHING_HELPERS.findall(open(os.path.join(unit, name)).read())
            if found:
                named[name] = sorted(set(found))
    assert named == {}


@pytest.mark.parametrize("argv, tier", [
    (["/venv/bin/python", "-m", "tf_ring.run", "-np", "2", "python", "x.py"], "tests/launcher"),
    (["python", "-m", "tf_ring.run", "-np", "2", "--min-np", "1", "python", "x.py"],
     "tests/launcher"),
    (["setpriv", "--reuid", "65534", "python", "-m", "tf_ring.run", "-np", "1", "true"],
     "tests/launcher"),
    (["/venv/bin/mpirun", "--allow-run-as-root", "-np", "1", "sleep", "60"], "tests/launcher"),
    (["tfringrun", "-np", "2", "python", "x.py"], "tests/launcher"),
    (["g++", "-std=c++17", "-o", "t", "t.cc"], "tests/builds"),
    (["python", "-m", "pip", "wheel", "--no-deps", "."], "tests/builds"),
    (["python", "tests/spark_jobs/digits_on_spark.py", "local-cluster[2,2,1024]"],
     "tests/integration"),
])
def test_the_guard_names_the_tier_of_a_job(argv, tier):
    assert tier in refusal(argv)


@pytest.mark.parametrize("argv", [
    ["python", "-m", "tf_ring.run", "--help"], ["python", "-m", "tf_ring.run", "--check-build"],
    ["python", "-P", "-m", "tf_ring.run", "--help"],
    ["/venv/bin/mpirun", "--version"], ["sh", "-c", "sleep 1"],
    ["python", "-c", "print('/tmp/tfringrun-feedbeef')"],
    ["python", "-m", "tf_ring.hosted.rsh_agent", "--hosts", "h.json", "-p", "22", "host", "true"],
])
def test_the_guard_lets_helper_processes_run(argv):
    assert refusal(argv) is None


def test_the_guard_stops_a_job_before_it_starts():
    # No such program: were the guard off, this would fail with FileNotFoundError.
    with pytest.raises(AssertionError, match="tests/unit runs no job, but this test does"):
        subprocess.run(["/nonexistent/mpirun", "-np", "2", "true"], timeout=10)
