"""Small eager collectives finished on the caller's own thread
(cc/tensorflow/eager_completion.h): while the caller waits, the engine's
callback only marks the op done; past the wait the engine finishes it as
before. Every result is checked against NumPy on all ranks' known inputs,
and stats()["caller_finished"] shows which side finished each op."""
import os

import numpy as np
import pytest
import tensorflow as tf

import tf_ring as hvd
from helpers import all_inputs, rank_input

LONG_WAIT_US = "2000000"  # far longer than any op here: the caller always sees it finish
LARGEST_INLINE_BYTES = 64 << 10  # eager_completion.cc's kMaxInlineBytes


def _restart(wait_us, process_sets=None):
    """Restarts the engine with TF_RING_EAGER_WAIT_US (None: unset)."""
    hvd.shutdown()
    if wait_us is None:
        os.environ.pop("TF_RING_EAGER_WAIT_US", None)
    else:
        os.environ["TF_RING_EAGER_WAIT_US"] = wait_us
    hvd.init(process_sets=process_sets)


@pytest.fixture(autouse=True)
def restore_environment():
    yield
    os.environ.pop("TF_RING_EAGER_WAIT_US", None)  # conftest restarts the engine after the file


def caller_finished(process_set=None):
    return hvd.stats(process_set=process_set)["caller_finished"]


def run_every_small_collective(step):
    """One small eager op of each kind, each checked against NumPy; returns
    how many ops ran."""
    n, me = hvd.size(), hvd.rank()
    shape = (6, 5)
    total = sum(all_inputs(shape, np.float32, seed=step))
    mine = rank_input(me, shape, np.float32, seed=step)
    np.testing.assert_allclose(hvd.allreduce(tf.constant(mine), op=hvd.Sum).numpy(), total,
                               rtol=1e-5)
    np.testing.assert_array_equal(hvd.broadcast(tf.constant(mine), root_rank=n - 1).numpy(),
                                  rank_input(n - 1, shape, np.float32, seed=step))
    np.testing.assert_array_equal(hvd.allgather(tf.constant(mine)).numpy(),
                                  np.concatenate(all_inputs(shape, np.float32, seed=step)))
    rows = np.arange(n * 2 * 3, dtype=np.int32).reshape(n * 2, 3) + 1000 * me + step
    received = hvd.alltoall(tf.constant(rows)).numpy()
    expected = np.concatenate([np.arange(n * 2 * 3, dtype=np.int32).reshape(n * 2, 3)[2 * me:2 * me + 2]
                               + 1000 * r + step for r in range(n)])
    np.testing.assert_array_equal(received, expected)
    tall = rank_input(me, (n * 2, 4), np.float32, seed=step + 1)
    tall_total = sum(all_inputs((n * 2, 4), np.float32, seed=step + 1))
    np.testing.assert_allclose(hvd.reducescatter(tf.constant(tall), op=hvd.Sum).numpy(),
                               tall_total[2 * me:2 * me + 2], rtol=1e-5)
    return 5


def test_with_a_long_wait_the_caller_finishes_every_small_eager_op():
    _restart(LONG_WAIT_US)
    before = caller_finished()
    ran = sum(run_every_small_collective(step) for step in range(20))
    assert caller_finished() - before == ran


def test_with_no_wait_the_engine_finishes_every_op():
    _restart("0")
    ran = sum(run_every_small_collective(step) for step in range(20))
    assert ran == 100 and caller_finished() == 0


def test_a_wait_shorter_than_the_op_lets_either_side_finish_it():
    """With a 1 us wait the caller and the engine race for each op: results
    stay right whichever side wins, and nothing hangs or finishes twice (a
    second done would abort TensorFlow)."""
    _restart("1")
    ran = sum(run_every_small_collective(step) for step in range(60))
    assert 0 <= caller_finished() <= ran


def test_large_tensors_and_graph_ops_are_left_to_the_engine():
    _restart(LONG_WAIT_US)
    large = tf.ones([LARGEST_INLINE_BYTES // 4 + 1], tf.float32)
    np.testing.assert_array_equal(hvd.allreduce(large, op=hvd.Sum).numpy(),
                                  np.full(large.shape, hvd.size(), np.float32))

    @tf.function
    def in_a_function(x):
        return hvd.allreduce(x, op=hvd.Sum)

    small = tf.ones([16], tf.float32)
    for _ in range(5):
        np.testing.assert_array_equal(in_a_function(small).numpy(), np.full([16], hvd.size()))
    graph = in_a_function.get_concrete_function(small).graph
    node = [op for op in graph.get_operations() if op.type == "TfRingAllreduce"][0]
    assert node.get_attr("eager") is False
    assert caller_finished() == 0


def test_a_small_eager_group_is_finished_by_its_caller_once():
    _restart(LONG_WAIT_US)
    n = hvd.size()
    tensors = [tf.constant(rank_input(hvd.rank(), (3, i + 1), np.float32, seed=i)) for i in range(6)]
    before = caller_finished()
    for _ in range(4):
        reduced = hvd.grouped_allreduce(tensors, op=hvd.Sum)
        for i, out in enumerate(reduced):
            np.testing.assert_allclose(out.numpy(), sum(all_inputs((3, i + 1), np.float32, seed=i)),
                                       rtol=1e-5)
        gathered = hvd.grouped_allgather(tensors[:2])
        np.testing.assert_array_equal(gathered[1].numpy(),
                                      np.concatenate(all_inputs((3, 2), np.float32, seed=1)))
        assert len(hvd.grouped_reducescatter([tf.ones([2 * n, 2])], op=hvd.Sum)[0].numpy()) == 2
    assert caller_finished() - before == 4 * 3  # one per group, not per tensor


def test_a_grouped_op_in_a_function_finishes_through_the_executor():
    """In a graph the engine hands a group's completion to TensorFlow's own
    threads (grouped_kernels.cc): results are the same and nothing waits."""
    _restart(LONG_WAIT_US)
    tensors = [tf.constant(rank_input(hvd.rank(), (40, i + 1), np.float32, seed=i)) for i in range(160)]

    @tf.function
    def step(xs):
        return hvd.grouped_allreduce(xs, op=hvd.Sum)

    for _ in range(3):
        reduced = step(tensors)
        for i in (0, 77, 159):
            np.testing.assert_allclose(reduced[i].numpy(),
                                       sum(all_inputs((40, i + 1), np.float32, seed=i)), rtol=1e-5)
    graph = step.get_concrete_function(tensors).graph
    node = [op for op in graph.get_operations() if op.type == "TfRingGroupedAllreduce"][0]
    assert node.get_attr("eager") is False
    assert caller_finished() == 0


def test_many_single_ops_in_a_function_finish_through_the_executor():
    """In a graph each fused batch's completions go to TensorFlow's threads
    in one task (TensorEntry::finish_on): every op of the batch gets its own
    result, and ops of other kinds in the same function still finish."""
    _restart(LONG_WAIT_US)
    n, me = hvd.size(), hvd.rank()
    tensors = [tf.constant(rank_input(me, (30, i + 1), np.float32, seed=i)) for i in range(40)]

    @tf.function
    def step(xs):
        sums = [hvd.allreduce(x, op=hvd.Sum) for x in xs]
        return sums, hvd.broadcast(xs[3], root_rank=n - 1), hvd.allgather(xs[5])

    for _ in range(3):
        sums, bcast, gathered = step(tensors)
        for i in range(40):
            np.testing.assert_allclose(sums[i].numpy(), sum(all_inputs((30, i + 1), np.float32, seed=i)),
                                       rtol=1e-5)
        np.testing.assert_array_equal(bcast.numpy(), rank_input(n - 1, (30, 4), np.float32, seed=3))
        np.testing.assert_array_equal(gathered.numpy(),
                                      np.concatenate(all_inputs((30, 6), np.float32, seed=5)))
    assert caller_finished() == 0


def test_an_error_reaches_the_waiting_caller_and_the_next_op_runs():
    _restart(LONG_WAIT_US)
    shape = [3] if hvd.rank() == 0 else [4]
    with pytest.raises(tf.errors.OpError) as raised:
        hvd.allreduce(tf.ones(shape), name="mismatched_for_wait")
    message = str(raised.value)
    assert "mismatched_for_wait" in message and "shape differs" in message
    assert run_every_small_collective(0) == 5


def test_a_process_set_counts_its_own_inline_finishes():
    first_two = hvd.ProcessSet([0, 1])
    _restart(LONG_WAIT_US, process_sets=[first_two])
    if hvd.rank() in (0, 1):
        out = hvd.allreduce(tf.fill([8], float(hvd.rank() + 1)), op=hvd.Sum, process_set=first_two)
        np.testing.assert_array_equal(out.numpy(), np.full([8], 3.0))
        assert caller_finished(first_two) == 1
    assert caller_finished() == 0
    hvd.barrier(name="after_set_test")  # rank 2 of 3 would otherwise shut down under the others


def test_by_default_the_wait_is_off_when_local_ranks_outnumber_the_cpus():
    allowed = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(allowed)})  # init() reads the calling thread's CPUs
        _restart(None)
        run_every_small_collective(0)
        assert caller_finished() == 0
    finally:
        os.sched_setaffinity(0, allowed)


def test_by_default_the_wait_is_on_where_each_local_rank_has_a_cpu():
    _restart(None)
    ran = sum(run_every_small_collective(step) for step in range(20))
    if len(os.sched_getaffinity(0)) >= hvd.local_size():
        assert 0 < caller_finished() <= ran
    else:  # e.g. 3 ranks on a 2-core machine
        assert caller_finished() == 0
