"""A process set with nothing queued on any rank costs no cycle of its own:
the global cycle's cache round carries which sets have work (engine.cc), so
global collectives leave an idle set's cycle count where it was, and a set
that gets work runs its cycles and its results come out right.

On 2 ranks the set is {0, 1}; on 3 ranks {0, 2} and {1, 2}: rank 1 is
outside the first, and the second overlaps it.
"""
import numpy as np
import pytest
import tensorflow as tf

import tf_ring as hvd

SET_RANKS = {2: [[0, 1]], 3: [[0, 2], [1, 2]]}


@pytest.fixture(scope="module")
def sets():
    made = [hvd.ProcessSet(r) for r in SET_RANKS[hvd.size()]]
    hvd.shutdown()
    hvd.init(process_sets=made)
    yield made
    hvd.shutdown()
    hvd.init()


def test_idle_sets_run_no_cycles_and_busy_ones_do(sets):
    x = tf.constant(np.arange(16, dtype=np.float32) + hvd.rank())
    want_global = sum(np.arange(16, dtype=np.float32) + r for r in range(hvd.size()))
    hvd.barrier(name="idle.start")
    before = [hvd.stats(process_set=ps)["cycles"] for ps in sets]
    global_before = hvd.stats()["cycles"]
    for i in range(30):
        np.testing.assert_array_equal(hvd.allreduce(x, op=hvd.Sum, name="idle.global").numpy(),
                                      want_global)
    after = [hvd.stats(process_set=ps)["cycles"] for ps in sets]
    assert hvd.stats()["cycles"] - global_before >= 30
    # Nothing was ever queued on any set: not one round on their communicators.
    assert after == before, (before, after)

    for ps in sets:
        if not ps.included():
            continue
        want = sum(np.arange(16, dtype=np.float32) + r for r in ps.ranks)
        for _ in range(5):
            out = hvd.allreduce(x, op=hvd.Sum, process_set=ps, name="idle.set")
            np.testing.assert_array_equal(out.numpy(), want)
        assert hvd.stats(process_set=ps)["cycles"] >= before[sets.index(ps)] + 5
    hvd.barrier(name="idle.end")
