"""What the static process-set files share (mpi_process_sets.py, the sets at
work; mpi_process_sets_errors.py, what is refused): the sets of each world
size, the engine restart that registers them, and the fixtures.

On 3 ranks the sets are {0,1} and {1,2} (overlapping) and {0} (disjoint
from {1,2}); on 2 ranks {0}, {1} (disjoint) and {0,1} (overlapping both).
"""
import pytest

import tf_ring as hvd

SET_RANKS = {2: [[0], [1], [0, 1]], 3: [[0, 1], [1, 2], [0]]}
STALL = {2: ([0], [0, 1], 1), 3: ([0, 1], [1, 2], 2)}  # set A, set B, B's member that waits


def restart(process_sets=None):
    hvd.shutdown()
    hvd.init(process_sets=process_sets)


@pytest.fixture(scope="module")
def sets():
    made = [hvd.ProcessSet(r) for r in SET_RANKS[hvd.size()]]
    restart(made)
    yield made
    restart()


@pytest.fixture(autouse=True)
def in_step():
    """Ranks outside a test's set skip ahead; a global barrier after every
    test keeps them from reaching the next test's shutdown() early."""
    yield
    hvd.barrier(name="after_test")


def mine(sets):
    """The sets this rank belongs to, in ascending id order: the order every
    rank calls them in, so blocking eager calls cannot wait on each other."""
    return [ps for ps in sets if ps.included()]
