import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tf_ring as hvd  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def tf_ring_session():
    hvd.init()
    yield


def _reset_name_counters():
    """Keras layer names and v1 graph op names come from per-process
    counters, and the collectives' automatic names from those. A file that
    built more models on some ranks than on others would leave the next
    file's names differing across ranks, which a launch of its own avoids."""
    import tensorflow as tf
    if "tf_keras" in sys.modules:
        sys.modules["tf_keras"].backend.clear_session()
    if "keras" in sys.modules:
        sys.modules["keras"].backend.clear_session()
    tf.compat.v1.reset_default_graph()


def _every_rank_here():
    """A barrier outside the engine. Without it, a rank that ends its last
    test early (one that runs no collective, or only local checks) shuts the
    engine down under a slower rank still inside that test."""
    from mpi4py import MPI  # imported late: tf_ring has initialised MPI by now
    MPI.COMM_WORLD.Barrier()


@pytest.fixture(scope="module", autouse=True)
def fresh_engine_per_file(tf_ring_session):
    """Several files share one launch (tests/parallel/test_parallel.py). A file may
    change TF_RING_* settings, restart the engine with its own process sets
    or leave counters behind; after each file the launch's environment comes
    back and the engine restarts from it, so the next file starts as if it
    had the launch to itself."""
    saved = dict(os.environ)
    yield
    _every_rank_here()
    _reset_name_counters()
    os.environ.clear()
    os.environ.update(saved)
    hvd.shutdown()
    hvd.init()


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
