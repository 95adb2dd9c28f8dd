"""Builds and runs the C++ engine unit tests with g++ alone: no TensorFlow
headers, no MPI. That the build succeeds is itself the check that the
engine's wire format and coordinator stay framework-free."""
import os
import subprocess

from conftest import REPO

SOURCES = ["cc/common/base/message.cc", "cc/common/base/counts.cc",
           "cc/common/negotiation/coordinator.cc",
           "cc/common/negotiation/coordinator_failures.cc",
           "cc/common/negotiation/coordinator_crossed.cc",
           "cc/common/negotiation/response_cache.cc", "cc/common/base/dtype.cc",
           "cc/common/transport/hierarchical_choice.cc",
           "cc/common/process_sets/process_set_change.cc",
           "cc/common/negotiation/agreed_settings.cc",
           "cc/common/transport/cpu_home_choice.cc"]


def build_and_run(tmp_path, test_source):
    binary = str(tmp_path / os.path.basename(test_source)[:-3])
    cmd = ["g++", "-std=c++17", "-O1", "-Wall", "-I", os.path.join(REPO, "cc"), "-o", binary] + \
          [os.path.join(REPO, s) for s in [test_source] + SOURCES]
    build = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([binary], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert ", 0 failed" in run.stdout


def test_engine_unit(tmp_path):
    build_and_run(tmp_path, "tests/cc/engine_unit_test.cc")


def test_coordinator_unit(tmp_path):
    build_and_run(tmp_path, "tests/cc/coordinator_unit_test.cc")


def test_out_of_step_unit(tmp_path):
    build_and_run(tmp_path, "tests/cc/out_of_step_unit_test.cc")


def test_response_cache_unit(tmp_path):
    build_and_run(tmp_path, "tests/cc/response_cache_unit_test.cc")


def test_cpu_home_unit(tmp_path):
    build_and_run(tmp_path, "tests/cc/cpu_home_unit_test.cc")
