"""A process set with nothing queued on any rank costs no cycle of its own:
the global cycle's cache round carries which sets have work (engine.cc), so
global collectives leave an idle set's cycle count where it was, and a set
that gets work runs its cycles and its results come out right. And join()
within a set, which must leave the other set and the global set alone.

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


def test_join_within_a_set(sets):
    """join(process_set=a): while one member of `a` has joined, the others'
    allreduces in `a` run with zeros in its place (Average divides by the
    members that submitted), join() returns the last member to join (a global
    rank), and another set and the global set run meanwhile with all of
    their ranks. Both orders, so the set's join state resets in between."""
    a = sets[0]
    other = sets[1] if len(sets) > 1 else None
    base = np.arange(6, dtype=np.float32)
    mine = base * (hvd.rank() + 1)
    if not a.included():  # a rank outside `a` cannot join it
        with pytest.raises(tf.errors.InvalidArgumentError, match="process set"):
            hvd.join(process_set=a)
    for first, last in (a.ranks, a.ranks[::-1]):
        if hvd.rank() == first:
            assert hvd.join(process_set=a) == last
        for i in range(3):
            if hvd.rank() == last:
                total = hvd.allreduce(tf.constant(mine), op=hvd.Sum, process_set=a,
                                      name="join.sum.%d" % i)
                np.testing.assert_array_equal(total.numpy(), mine)  # zeros from `first`
                mean = hvd.allreduce(tf.constant(mine), op=hvd.Average, process_set=a,
                                     name="join.mean.%d" % i)
                np.testing.assert_allclose(mean.numpy(), mine)  # divided by 1 member
            # `other` runs meanwhile, unless `first` (blocked in join) is in it.
            if other is not None and other.included() and first not in other.ranks:
                out = hvd.allreduce(tf.constant(mine), op=hvd.Sum, process_set=other,
                                    name="join.other.%d" % i)
                want = sum(base * (r + 1) for r in other.ranks)
                np.testing.assert_array_equal(out.numpy(), want)
        if hvd.rank() == last:
            assert hvd.join(process_set=a) == last
        # The global set never saw a join: every rank's data counts.
        out = hvd.allreduce(tf.constant(mine), op=hvd.Sum, name="join.global")
        np.testing.assert_array_equal(out.numpy(),
                                      sum(base * (r + 1) for r in range(hvd.size())))
