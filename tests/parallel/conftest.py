import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tf_ring as hvd  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def tf_ring_session():
    hvd.init()
    yield


def pytest_runtest_logreport(report):
    """A failure on one rank ends the whole job at once. Left to pytest, the
    failed rank would run its teardown and exit while the others go on to the
    next test, whose collectives (or init(), which is collective too) would
    wait for a rank that has left, until the launcher's timeout."""
    if report.failed:
        rank = os.environ.get("OMPI_COMM_WORLD_RANK", "?")
        sys.stdout.write("\n[rank %s] %s failed in %s:\n%s\n"
                         % (rank, report.nodeid, report.when, report.longreprtext))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)  # no MPI_Finalize: mpirun sees the failure and stops every rank
