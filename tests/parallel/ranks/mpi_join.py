"""join(): ranks with different numbers of batches. A rank that joins keeps
taking part with no data until every rank has joined; results are checked
against values recomputed here for every rank."""
import re

import numpy as np
import pytest
import tensorflow as tf

import tf_ring as hvd
from helpers import rank_input


def steps_of(rank):
    # Rank r has r + 2 batches: every rank stops at a different step.
    return rank + 2


def test_uneven_sum_and_average_then_join_returns_last_rank():
    me, size = hvd.rank(), hvd.size()
    for step in range(steps_of(me)):
        x = tf.fill([5], float((me + 1) * (step + 1)))
        total = hvd.allreduce(x, op=hvd.Sum, name="join_sum").numpy()
        mean = hvd.allreduce(x, op=hvd.Average, name="join_avg").numpy()
        active = [q for q in range(size) if steps_of(q) > step]
        expected = sum((q + 1) * (step + 1) for q in active)
        np.testing.assert_allclose(total, np.full(5, expected))
        # The divisor is the number of ranks that submitted, not size().
        np.testing.assert_allclose(mean, np.full(5, expected / len(active)), rtol=1e-6)
    assert hvd.join() == size - 1


def test_min_max_product_ignore_joined_ranks():
    me, size = hvd.rank(), hvd.size()
    if me > 0:
        x = tf.constant(rank_input(me, [4], tf.float32, seed=3))
        others = [rank_input(q, [4], np.float32, seed=3) for q in range(1, size)]
        np.testing.assert_allclose(hvd.allreduce(x, op=hvd.Min, name="join_min").numpy(),
                                   np.min(others, axis=0))
        np.testing.assert_allclose(hvd.allreduce(x, op=hvd.Max, name="join_max").numpy(),
                                   np.max(others, axis=0))
        np.testing.assert_allclose(hvd.allreduce(x, op=hvd.Product, name="join_prod").numpy(),
                                   np.prod(others, axis=0), rtol=1e-5)
        i = tf.constant([me, -me, 7], dtype=tf.int32)
        np.testing.assert_array_equal(
            hvd.allreduce(i, op=hvd.Min, name="join_imin").numpy(),
            np.min([[q, -q, 7] for q in range(1, size)], axis=0))
    last = hvd.join()
    assert 1 <= last < size  # rank 0 joined first
    everyone = hvd.allgather(tf.constant([last]), name="join_last_seen").numpy()
    assert (everyone == last).all()


def test_allgather_gets_no_rows_from_joined_ranks():
    me, size = hvd.rank(), hvd.size()
    if me != 0:  # rank 0 has no data at all
        rows = tf.constant(rank_input(me, [me, 3], tf.float32, seed=5))
        got = hvd.allgather(rows, name="join_gather").numpy()
        expected = np.concatenate([rank_input(q, [q, 3], np.float32, seed=5) for q in range(1, size)])
        np.testing.assert_allclose(got, expected)
    hvd.join()


def test_broadcast_from_active_root_reaches_active_ranks():
    me, size = hvd.rank(), hvd.size()
    root = size - 1
    if me != 0:
        value = tf.constant([float(me), 2.5])
        got = hvd.broadcast(value, root_rank=root, name="join_bcast").numpy()
        np.testing.assert_allclose(got, [float(root), 2.5])
    hvd.join()


def test_collectives_that_need_every_rank_fail_clearly():
    me, size = hvd.rank(), hvd.size()
    if me != 0:
        with pytest.raises(tf.errors.InvalidArgumentError) as info:
            hvd.broadcast(tf.ones([2]), root_rank=0, name="join_bcast_dead_root")
        assert re.search(r"'join_bcast_dead_root'.*root rank 0.*join\(\)", str(info.value))
        with pytest.raises(tf.errors.InvalidArgumentError) as info:
            hvd.alltoall(tf.ones([size, 2]), name="join_a2a")
        assert re.search(r"alltoall of tensor 'join_a2a' cannot run after rank 0 called join\(\)",
                         str(info.value))
        with pytest.raises(tf.errors.InvalidArgumentError) as info:
            hvd.reducescatter(tf.ones([size, 2]), name="join_rs")
        assert "rank 0 called join()" in str(info.value)
    hvd.join()
    # After the join completes, everything works again on every rank.
    out = hvd.allreduce(tf.ones([3]), op=hvd.Sum, name="after_join").numpy()
    np.testing.assert_allclose(out, np.full(3, size))


def test_uneven_training_matches_a_replay_of_every_rank():
    """A linear model trained with DistributedGradientTape on uneven data,
    then broadcast from the rank join() names, ends with the weights of a
    NumPy replay in which each step averages the gradients of the ranks that
    still have data."""
    me, size = hvd.rank(), hvd.size()
    lr = 0.05

    def batches(rank):
        rng = np.random.default_rng(42 + rank)
        out = []
        for _ in range(3 * rank + 2):
            x = rng.normal(size=(8, 2)).astype(np.float32)
            y = (x @ np.array([[1.5], [-2.0]], np.float32) + 0.5).astype(np.float32)
            out.append((x, y))
        return out

    w = tf.Variable(tf.zeros([2, 1]))
    b = tf.Variable(tf.zeros([1]))

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) + b - y) ** 2)
        tape = hvd.DistributedGradientTape(tape)
        gw, gb = tape.gradient(loss, [w, b])
        w.assign_sub(lr * gw)
        b.assign_sub(lr * gb)

    for x, y in batches(me):
        train_step(tf.constant(x), tf.constant(y))
    last = hvd.join()
    assert last == size - 1
    # Ranks that joined early stopped updating: take the model of the last one.
    hvd.broadcast_variables([w, b], root_rank=last)

    all_batches = [batches(q) for q in range(size)]
    rw, rb = np.zeros((2, 1), np.float64), np.zeros(1, np.float64)
    for step in range(max(len(bs) for bs in all_batches)):
        grads = []
        for bs in all_batches:
            if step < len(bs):
                x, y = bs[step]
                err = x @ rw + rb - y
                grads.append((2 * x.T @ err / err.size, 2 * err.mean(axis=0)))
        rw -= lr * np.mean([g[0] for g in grads], axis=0)
        rb -= lr * np.mean([g[1] for g in grads], axis=0)
    np.testing.assert_allclose(w.numpy(), rw, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(b.numpy(), rb, rtol=1e-4, atol=1e-5)


def test_join_inside_tf_function_returns_a_tensor():
    """A graph-mode join: the uneven loop and the join both run in tf.function."""
    me, size = hvd.rank(), hvd.size()

    @tf.function
    def step(x):
        return hvd.allreduce(x, op=hvd.Sum, name="fn_join_sum")

    @tf.function
    def finish():
        return hvd.join()

    for i in range(me + 1):  # rank r runs r + 1 steps
        got = step(tf.fill([3], float(i + 1)))
        active = sum(1 for q in range(size) if q + 1 > i)
        np.testing.assert_allclose(got.numpy(), np.full(3, float(i + 1) * active))
    last = finish()
    assert isinstance(last, tf.Tensor) and last.dtype == tf.int32 and last.shape == ()
    assert int(last) == size - 1
