"""alltoall and reducescatter: uneven splits and rows, every dtype, tf.function,
gradients, and bad arguments reported on every rank. Expected values are
recomputed with NumPy from every rank's known input."""
import re

import numpy as np
import pytest
import tensorflow as tf

import tf_ring as hvd
from helpers import all_inputs, rank_input

REDUCE_DTYPES = [tf.uint8, tf.int8, tf.uint16, tf.int16, tf.int32, tf.int64, tf.float16,
                 tf.bfloat16, tf.float32, tf.float64]
MOVE_DTYPES = REDUCE_DTYPES + [tf.bool]


def splits_of(rank):
    """Uneven splits; rank 0 sends nothing at all, others send 0 to 3 rows per peer."""
    if rank == 0:
        return [0] * hvd.size()
    return [(rank + j) % 4 for j in range(hvd.size())]


def expected_alltoall(inputs, splits, me):
    pieces, counts = [], []
    for sender, (x, s) in enumerate(zip(inputs, splits)):
        start = sum(s[:me])
        pieces.append(x[start:start + s[me]])
        counts.append(s[me])
    return np.concatenate(pieces), counts


def as_f64(t):
    return tf.cast(t, tf.float64).numpy()


@pytest.mark.parametrize("dtype", MOVE_DTYPES, ids=lambda d: d.name)
def test_alltoall_uneven_splits_every_dtype(dtype):
    splits = [splits_of(r) for r in range(hvd.size())]
    inputs = [rank_input(r, (sum(splits[r]), 2), dtype, seed=11) for r in range(hvd.size())]
    received, counts = hvd.alltoall(tf.constant(inputs[hvd.rank()]), splits=splits[hvd.rank()],
                                    name="a2a_" + dtype.name)
    want, want_counts = expected_alltoall(inputs, splits, hvd.rank())
    assert received.dtype == dtype and received.shape == want.shape
    np.testing.assert_array_equal(as_f64(received), want.astype(np.float64))
    assert counts.dtype == tf.int32 and counts.numpy().tolist() == want_counts


def test_alltoall_without_splits_sends_equal_blocks_and_returns_only_the_tensor():
    rows = 2 * hvd.size()
    inputs = all_inputs((rows,), tf.int64, seed=12)
    received = hvd.alltoall(tf.constant(inputs[hvd.rank()]), name="a2a_default")
    assert isinstance(received, tf.Tensor)  # Horovod returns no splits here
    want, _ = expected_alltoall(inputs, [[2] * hvd.size()] * hvd.size(), hvd.rank())
    np.testing.assert_array_equal(received.numpy(), want)


def test_alltoall_without_splits_needs_rows_divisible_by_size():
    # Only the last rank's rows do not divide: every rank gets the error.
    last = hvd.size() - 1
    rows = hvd.size() + 1 if hvd.rank() == last else hvd.size()
    expect_error(lambda: hvd.alltoall(tf.ones((rows, 2)), name="a2a_indivisible"),
                 "a2a_indivisible", "first dimension %d on rank %d does not divide by the %d ranks"
                 % (hvd.size() + 1, last, hvd.size()),
                 "splits=", error=tf.errors.InvalidArgumentError)


def test_alltoall_in_tf_function_with_tensor_splits():
    splits = [splits_of(r) for r in range(hvd.size())]
    inputs = [rank_input(r, (sum(splits[r]), 3), tf.float32, seed=13) for r in range(hvd.size())]

    @tf.function
    def exchange(x, s):
        return hvd.alltoall(x, splits=s)

    received, _ = exchange(tf.constant(inputs[hvd.rank()]), tf.constant(splits[hvd.rank()], tf.int64))
    np.testing.assert_allclose(received.numpy(), expected_alltoall(inputs, splits, hvd.rank())[0])


def test_alltoall_gradient_returns_rows_to_their_sender():
    # loss on rank j weights every received row by (j + 1); the gradient of a
    # sent row is the weight of the rank it went to.
    splits = [[1 + (r + j) % 2 for j in range(hvd.size())] for r in range(hvd.size())]
    mine = splits[hvd.rank()]
    x = tf.Variable(tf.ones((sum(mine), 2)))
    with tf.GradientTape() as tape:
        received, _ = hvd.alltoall(x * 1.0, splits=mine, name="a2a_grad")
        loss = tf.reduce_sum(received) * (hvd.rank() + 1)
    grad = tape.gradient(loss, x).numpy()
    want = np.concatenate([np.full((mine[j], 2), j + 1.0) for j in range(hvd.size())])
    np.testing.assert_allclose(grad, want)


def block_rows(rows, rank):
    base, extra = divmod(rows, hvd.size())
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


@pytest.mark.parametrize("dtype", REDUCE_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average, hvd.Min, hvd.Max], ids=["sum", "avg", "min", "max"])
def test_reducescatter_rows_not_divisible(dtype, op):
    rows = 2 * hvd.size() + 1  # earlier ranks get one extra row
    inputs = all_inputs((rows, 3), dtype, seed=14 + op)
    out = hvd.reducescatter(tf.constant(inputs[hvd.rank()]), op=op,
                            name="rs_%s_%d" % (dtype.name, op))
    stack = np.stack([x.astype(np.float64) for x in inputs])
    full = {hvd.Sum: stack.sum(0), hvd.Min: stack.min(0), hvd.Max: stack.max(0),
            hvd.Average: stack.sum(0) / hvd.size()}[op]
    if op == hvd.Average and not dtype.is_floating:
        full = np.trunc(full)
    start, end = block_rows(rows, hvd.rank())
    assert out.dtype == dtype and out.shape == (end - start, 3)
    tol = {tf.float16: 3e-2, tf.bfloat16: 8e-2}.get(dtype, 1e-6)
    np.testing.assert_allclose(as_f64(out), full[start:end], rtol=tol, atol=tol)


def test_reducescatter_fewer_rows_than_ranks_and_scale_factors():
    inputs = all_inputs((1, 2), tf.float32, seed=15)
    out = hvd.reducescatter(tf.constant(inputs[hvd.rank()]), op=hvd.Sum, prescale_factor=2.0,
                            postscale_factor=0.25, name="rs_small")
    want = np.sum(inputs, axis=0) * 0.5
    assert out.shape == ((1, 2) if hvd.rank() == 0 else (0, 2))
    if hvd.rank() == 0:
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)


def test_reducescatter_in_tf_function():
    inputs = all_inputs((5, 2), tf.float64, seed=16)
    fn = tf.function(lambda x: hvd.reducescatter(x, op=hvd.Sum))
    start, end = block_rows(5, hvd.rank())
    np.testing.assert_allclose(fn(tf.constant(inputs[hvd.rank()])).numpy(),
                               np.sum(inputs, axis=0)[start:end])


@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average], ids=["sum", "avg"])
def test_reducescatter_gradient_is_scaled_allgather(op):
    rows = hvd.size() + 1
    x = tf.Variable(tf.ones((rows, 2)))
    with tf.GradientTape() as tape:
        out = hvd.reducescatter(x * 1.0, op=op, postscale_factor=3.0, name="rs_grad_%d" % op)
        loss = tf.reduce_sum(out) * (hvd.rank() + 1)
    grad = tape.gradient(loss, x).numpy()
    # Horovod's convention: Sum -> size * allgather(grad), Average -> allgather(grad).
    scale = 3.0 * (hvd.size() if op == hvd.Sum else 1)
    want = np.concatenate([np.full((block_rows(rows, r)[1] - block_rows(rows, r)[0], 2),
                                   (r + 1) * scale) for r in range(hvd.size())])
    np.testing.assert_allclose(grad, want, rtol=1e-6)


def expect_error(fn, *fragments, error=tf.errors.InvalidArgumentError):
    with pytest.raises(error) as info:
        fn()
    for fragment in fragments:
        assert re.search(fragment, str(info.value)), "%r not in %r" % (fragment, str(info.value))


def test_splits_not_summing_to_rows_fail_on_every_rank():
    last = hvd.size() - 1
    splits = [1] * hvd.size()
    if hvd.rank() == last:
        splits[0] += 1  # sums to size + 1 for a tensor of size rows
    expect_error(lambda: hvd.alltoall(tf.ones((hvd.size(), 2)), splits=splits, name="bad_splits"),
                 "bad_splits", "splits on rank %d" % last, "sum to %d" % (hvd.size() + 1),
                 "first dimension is %d" % hvd.size())


def test_splits_of_wrong_length_or_negative_fail_on_every_rank():
    expect_error(lambda: hvd.alltoall(tf.ones((2,)), splits=[2], name="short_splits"),
                 "short_splits", "splits on rank 0 have 1 entries", "one per rank")
    neg = [2 + hvd.size() - 1] + [-1] * (hvd.size() - 1)
    expect_error(lambda: hvd.alltoall(tf.ones((2,)), splits=neg, name="neg_splits"),
                 "neg_splits", "negative")


def test_alltoall_scalar_and_reducescatter_mismatch_fail_on_every_rank():
    expect_error(lambda: hvd.alltoall(tf.constant(1.0), name="a2a_scalar"),
                 "a2a_scalar", "rank 1 or more")
    rows = 4 if hvd.rank() == hvd.size() - 1 else 3
    expect_error(lambda: hvd.reducescatter(tf.ones((rows, 2)), name="rs_shape"),
                 "rs_shape", "shape differs", r"\[3, 2\] on", r"\[4, 2\] on rank %d" % (hvd.size() - 1),
                 error=tf.errors.FailedPreconditionError)


def test_engine_still_works_after_exchange_errors():
    out = hvd.alltoall(tf.fill([hvd.size()], hvd.rank()), name="after_a2a_errors")
    np.testing.assert_array_equal(out.numpy(), np.arange(hvd.size()))
