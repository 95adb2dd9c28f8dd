"""pytest plugin for the per-rank GPU test files (`-p gpu_rank_plugin`):
picks this rank's GPU, starts the engine once, and ends the whole job on the
first failure (see tests/parallel/ranks/conftest.py for why). A plugin, not a
conftest.py, so the single-process run's `conftest` stays the only one."""
import os
import sys

import pytest

import gpu_env


@pytest.fixture(scope="session", autouse=True)
def engine_session():
    if gpu_env.unavailable_reason():
        yield
        return
    if gpu_env.GPU:
        import torch
        local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"))
        torch.cuda.set_device(local % torch.cuda.device_count())
    import tf_ring_engine
    tf_ring_engine.init()
    yield


def pytest_runtest_logreport(report):
    if report.failed:
        rank = os.environ.get("OMPI_COMM_WORLD_RANK", "?")
        sys.stdout.write("\n[rank %s] %s failed in %s:\n%s\n" % (rank, report.nodeid, report.when,
                                                                  report.longreprtext))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
