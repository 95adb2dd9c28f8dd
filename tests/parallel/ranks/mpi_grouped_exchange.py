"""grouped_allgather and grouped_reducescatter: every member against NumPy on
all ranks' recomputed inputs, one atomic enqueue (the members fuse even
eagerly), tf.function, and Horovod's gradients."""
import numpy as np
import pytest
import tensorflow as tf

import tf_ring as hvd
from helpers import all_inputs, rank_input


def as_f64(t):
    return tf.cast(t, tf.float64).numpy()


def block_rows(rows, rank):
    base, extra = divmod(rows, hvd.size())
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


GATHER_DTYPES = [tf.uint16, tf.int16, tf.float32, tf.bfloat16, tf.int64, tf.bool]


def test_grouped_allgather_uneven_rows_mixed_dtypes():
    # Member i of rank r has r + i rows (rank 0's first member is empty).
    inputs = [[rank_input(r, (r + i, 2), d, seed=70 + i) for r in range(hvd.size())]
              for i, d in enumerate(GATHER_DTYPES)]
    outs = hvd.grouped_allgather([tf.constant(x[hvd.rank()]) for x in inputs], name="gag_mixed")
    assert len(outs) == len(GATHER_DTYPES)
    for dtype, x, out in zip(GATHER_DTYPES, inputs, outs):
        want = np.concatenate(x)
        assert out.dtype == dtype and out.shape == want.shape
        np.testing.assert_array_equal(as_f64(out), want.astype(np.float64))


def test_grouped_allgather_is_one_enqueue():
    before = hvd.stats()
    hvd.grouped_allgather([tf.ones((1, 3)), tf.ones((2, 3)), tf.ones((1, 3))], name="gag_fused")
    after = hvd.stats()
    # Eager single allgathers block one by one and can never share a batch.
    assert after["fused_batches"] - before["fused_batches"] >= 1
    assert after["tensors"] - before["tensors"] == 3


@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average, hvd.Max], ids=["sum", "avg", "max"])
def test_grouped_reducescatter_matches_numpy(op):
    dtypes = [tf.float32, tf.int16, tf.float64]
    shapes = [(2 * hvd.size() + 1, 2), (hvd.size(), 3), (1, 4)]  # uneven, even, fewer rows
    inputs = [all_inputs(s, d, seed=80 + i) for i, (s, d) in enumerate(zip(shapes, dtypes))]
    outs = hvd.grouped_reducescatter([tf.constant(x[hvd.rank()]) for x in inputs], op=op,
                                     name="grs_%d" % op)
    for dtype, shape, x, out in zip(dtypes, shapes, inputs, outs):
        stack = np.stack([a.astype(np.float64) for a in x])
        full = {hvd.Sum: stack.sum(0), hvd.Max: stack.max(0),
                hvd.Average: stack.sum(0) / hvd.size()}[op]
        if op == hvd.Average and not dtype.is_floating:
            full = np.trunc(full)
        start, end = block_rows(shape[0], hvd.rank())
        assert out.dtype == dtype and out.shape == (end - start,) + shape[1:]
        np.testing.assert_allclose(as_f64(out), full[start:end], rtol=1e-6)


def test_grouped_reducescatter_scale_factors_and_empty_list():
    assert hvd.grouped_reducescatter([]) == [] and hvd.grouped_allgather([]) == []
    x = all_inputs((hvd.size(), 2), tf.float32, seed=90)
    out = hvd.grouped_reducescatter([tf.constant(x[hvd.rank()])], op=hvd.Sum,
                                    prescale_factor=2.0, postscale_factor=0.25, name="grs_scaled")
    me = hvd.rank()
    np.testing.assert_allclose(out[0].numpy(), np.sum(x, 0)[me:me + 1] * 0.5, rtol=1e-6)


def test_grouped_gradients_in_tf_function():
    # Rank r weights its outputs by (r + 1): allgather's gradient is this
    # rank's rows of the averaged gradient; reducescatter's is Horovod's
    # size * allgather (Sum) or allgather (Average) of the gradients.
    rows = hvd.size() + 1
    a = tf.Variable(tf.ones((hvd.rank() + 1, 2)))
    b = tf.Variable(tf.ones((rows, 2)))
    c = tf.Variable(tf.ones((rows, 1), tf.float64))
    weight = float(hvd.rank() + 1)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            (ga,) = hvd.grouped_allgather([a * 1.0], name="gag_grad")
            sb, ac = hvd.grouped_reducescatter([b * 1.0], op=hvd.Sum, name="grs_grad_sum") + \
                hvd.grouped_reducescatter([c * 1.0], op=hvd.Average, postscale_factor=3.0,
                                          name="grs_grad_avg")
            loss = weight * (tf.reduce_sum(ga) + tf.reduce_sum(sb) +
                             tf.cast(tf.reduce_sum(ac), tf.float32))
        return tape.gradient(loss, [a, b, c])

    grad_a, grad_b, grad_c = [g.numpy() for g in step()]
    weights = np.arange(1, hvd.size() + 1, dtype=np.float64)
    np.testing.assert_allclose(grad_a, np.full((hvd.rank() + 1, 2), weights.mean()))
    per_row = np.concatenate([np.full(block_rows(rows, r)[1] - block_rows(rows, r)[0], weights[r])
                              for r in range(hvd.size())])
    np.testing.assert_allclose(grad_b, hvd.size() * np.repeat(per_row[:, None], 2, axis=1))
    np.testing.assert_allclose(grad_c, 3.0 * per_row[:, None])
