"""Builds and runs the C++ engine unit test with g++ alone: no TensorFlow
headers, no MPI. That the build succeeds is itself the check that the
engine's wire format and coordinator stay framework-free."""
import os
import subprocess

from conftest import REPO

SOURCES = ["tests/cc/engine_unit_test.cc", "cc/common/base/message.cc", "cc/common/base/counts.cc",
           "cc/common/negotiation/coordinator.cc",
           "cc/common/negotiation/coordinator_failures.cc", "cc/common/base/dtype.cc",
           "cc/common/transport/hierarchical_choice.cc",
           "cc/common/process_sets/process_set_change.cc",
           "cc/common/negotiation/agreed_settings.cc"]


def test_engine_unit(tmp_path):
    binary = str(tmp_path / "engine_unit_test")
    cmd = ["g++", "-std=c++17", "-O1", "-Wall", "-I", os.path.join(REPO, "cc"), "-o", binary] + \
          [os.path.join(REPO, s) for s in SOURCES]
    build = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([binary], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert ", 0 failed" in run.stdout
