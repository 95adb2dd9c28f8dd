"""grouped_allreduce, allreduce of tf.IndexedSlices, fp16 compression,
broadcast_variables, broadcast_object and allgather_object, checked against
values recomputed from every rank's known inputs."""
import re

import numpy as np
import pytest
import tensorflow as tf

import tf_ring as hvd
from helpers import all_inputs, rank_input

REDUCE_DTYPES = [tf.uint8, tf.int8, tf.uint16, tf.int16, tf.int32, tf.int64, tf.float16,
                 tf.bfloat16, tf.float32, tf.float64]


def as_f64(t):
    return tf.cast(t, tf.float64).numpy()


@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product],
                         ids=["sum", "avg", "min", "max", "prod"])
def test_grouped_allreduce_every_dtype_in_one_call(op):
    low, high = (1, 4) if op == hvd.Product else (-8, 8)
    inputs = [all_inputs((i + 1, 2), d, seed=20 + i, low=low, high=high)
              for i, d in enumerate(REDUCE_DTYPES)]
    outs = hvd.grouped_allreduce([tf.constant(x[hvd.rank()]) for x in inputs], op=op,
                                 name="grouped_%d" % op)
    assert len(outs) == len(REDUCE_DTYPES)
    for dtype, x, out in zip(REDUCE_DTYPES, inputs, outs):
        stack = np.stack([a.astype(np.float64) for a in x])
        want = {hvd.Sum: stack.sum(0), hvd.Average: stack.mean(0), hvd.Min: stack.min(0),
                hvd.Max: stack.max(0), hvd.Product: stack.prod(0)}[op]
        if op == hvd.Average and not dtype.is_floating:
            want = np.trunc(stack.sum(0) / hvd.size())
        tol = {tf.float16: 3e-2, tf.bfloat16: 8e-2}.get(dtype, 1e-6)
        assert out.dtype == dtype
        np.testing.assert_allclose(as_f64(out), want, rtol=tol, atol=tol)


def test_grouped_allreduce_in_tf_function_with_scale_and_gradient():
    inputs = [all_inputs((3,), tf.float32, seed=30), all_inputs((2, 2), tf.float32, seed=31)]
    a = tf.Variable(inputs[0][hvd.rank()])
    b = tf.Variable(inputs[1][hvd.rank()])

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            ra, rb = hvd.grouped_allreduce([a * 2.0, b * 3.0], op=hvd.Sum, postscale_factor=0.5)
            loss = tf.reduce_sum(ra) + tf.reduce_sum(rb)
        return ra, rb, tape.gradient(loss, [a, b])

    ra, rb, (ga, gb) = step()
    np.testing.assert_allclose(ra.numpy(), np.sum(inputs[0], 0) * 2.0 * 0.5, rtol=1e-5)
    np.testing.assert_allclose(rb.numpy(), np.sum(inputs[1], 0) * 3.0 * 0.5, rtol=1e-5)
    # d loss / d a = 2 * (grouped allreduce Sum of 0.5 * ones) = size.
    np.testing.assert_allclose(ga.numpy(), np.full(3, 2.0 * 0.5 * hvd.size()))
    np.testing.assert_allclose(gb.numpy(), np.full((2, 2), 3.0 * 0.5 * hvd.size()))


def test_grouped_allreduce_empty_list_and_errors_on_every_rank():
    assert hvd.grouped_allreduce([]) == []
    shape = (3,) if hvd.rank() == hvd.size() - 1 else (2,)
    with pytest.raises(tf.errors.FailedPreconditionError, match=r"bad_group\.1.*shape differs"):
        hvd.grouped_allreduce([tf.ones(2), tf.ones(shape)], name="bad_group")
    out = hvd.grouped_allreduce([tf.ones(2)], op=hvd.Sum, name="after_bad_group")
    np.testing.assert_allclose(out[0].numpy(), [hvd.size()] * 2)


def sparse_input(rank):
    """Rank r touches rows {r, r + 1} of a 6-row table, with distinct values."""
    values = rank_input(rank, (2, 3), tf.float32, seed=40)
    return values, np.array([rank, rank + 1], np.int64)


@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average], ids=["sum", "avg"])
def test_allreduce_indexed_slices_gathers_and_matches_dense(op):
    values, indices = sparse_input(hvd.rank())
    slices = tf.IndexedSlices(tf.constant(values), tf.constant(indices), tf.constant([6, 3], tf.int64))
    out = hvd.allreduce(slices, op=op, name="sparse_%d" % op)
    assert isinstance(out, tf.IndexedSlices)
    assert out.indices.numpy().tolist() == [i for r in range(hvd.size()) for i in sparse_input(r)[1]]
    dense = np.zeros((6, 3))
    for r in range(hvd.size()):
        v, i = sparse_input(r)
        np.add.at(dense, i, v)
    if op == hvd.Average:
        dense /= hvd.size()
    np.testing.assert_allclose(tf.convert_to_tensor(out).numpy(), dense, rtol=1e-6)


@pytest.mark.parametrize("op", [hvd.Min, hvd.Max, hvd.Product], ids=["min", "max", "prod"])
def test_allreduce_indexed_slices_rejects_other_ops(op):
    slices = tf.IndexedSlices(tf.ones((1, 2)), tf.constant([0]), tf.constant([2, 2]))
    with pytest.raises(NotImplementedError, match="only op=Sum or op=Average"):
        hvd.allreduce(slices, op=op, name="sparse_other_op")


@pytest.mark.parametrize("scale", [{"prescale_factor": 2.0}, {"postscale_factor": 0.5}],
                         ids=["pre", "post"])
def test_allreduce_indexed_slices_rejects_scale_factors(scale):
    slices = tf.IndexedSlices(tf.ones((1, 2)), tf.constant([0]), tf.constant([2, 2]))
    with pytest.raises(NotImplementedError, match="prescale_factor or postscale_factor"):
        hvd.allreduce(slices, op=hvd.Sum, name="sparse_scaled", **scale)


@pytest.mark.parametrize("dtype", [tf.int8, tf.int32, tf.int64], ids=lambda d: d.name)
def test_allreduce_indexed_slices_integer_average_divides_to_float(dtype):
    # TensorFlow's true division: int8/16 -> float32, int32/64 -> float64.
    values = np.array([[3 * hvd.rank() + 1, 7]], dtype.as_numpy_dtype)
    slices = tf.IndexedSlices(tf.constant(values), tf.constant([hvd.rank()]),
                              tf.constant([hvd.size(), 2]))
    out = hvd.allreduce(slices, op=hvd.Average, name="sparse_int_avg_" + dtype.name)
    want_dtype = tf.float32 if dtype == tf.int8 else tf.float64
    assert out.values.dtype == want_dtype
    want = np.array([[3 * r + 1, 7] for r in range(hvd.size())], np.float64) / hvd.size()
    np.testing.assert_allclose(out.values.numpy(), want, rtol=1e-6)
    assert out.indices.numpy().tolist() == list(range(hvd.size()))


def test_fp16_compression_travels_as_float16_and_returns_own_dtype():
    # 1 + 2**-12 is not a float16 number: it arrives as 1.0 only if it really
    # went over the wire as float16.
    x = tf.constant([1.0 + 2.0 ** -12, 3.0], tf.float64)
    out = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16, name="fp16")
    assert out.dtype == tf.float64
    np.testing.assert_array_equal(out.numpy(), [hvd.size() * 1.0, hvd.size() * 3.0])
    plain = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.none, name="no_fp16")
    np.testing.assert_array_equal(plain.numpy(), [hvd.size() * (1.0 + 2.0 ** -12), hvd.size() * 3.0])
    ints = hvd.grouped_allreduce([tf.constant([7], tf.int32)], op=hvd.Sum,
                                 compression=hvd.Compression.fp16, name="fp16_ints")
    assert ints[0].dtype == tf.int32 and ints[0].numpy().tolist() == [7 * hvd.size()]


def test_broadcast_variables_eager_and_in_tf_function():
    root = hvd.size() - 1
    variables = [tf.Variable(rank_input(hvd.rank(), (3,), tf.float32, seed=50)),
                 tf.Variable(rank_input(hvd.rank(), (2, 2), tf.int64, seed=51))]
    assert hvd.broadcast_variables(variables, root_rank=root) is None
    np.testing.assert_array_equal(variables[0].numpy(), rank_input(root, (3,), tf.float32, seed=50))
    np.testing.assert_array_equal(variables[1].numpy(), rank_input(root, (2, 2), tf.int64, seed=51))

    v = tf.Variable(float(hvd.rank() + 10))

    @tf.function
    def sync():
        hvd.broadcast_variables([v], root_rank=0)

    sync()
    assert v.numpy() == 10.0


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y


def test_broadcast_object_arbitrary_python_objects():
    root = hvd.size() - 1
    obj = None
    if hvd.rank() == root:
        obj = {"array": np.arange(5) * root, "point": Point(root, "y"), "fn": lambda z: z + root,
               "nested": [1, (2.5, None), {"k": b"bytes"}]}
    got = hvd.broadcast_object(obj, root_rank=root, name="bcast_obj")
    np.testing.assert_array_equal(got["array"], np.arange(5) * root)
    assert (got["point"].x, got["point"].y) == (root, "y")
    assert got["fn"](1) == 1 + root
    assert got["nested"] == [1, (2.5, None), {"k": b"bytes"}]


def test_allgather_object_objects_of_different_sizes():
    mine = {"rank": hvd.rank(), "payload": "x" * (100 * hvd.rank())}
    got = hvd.allgather_object(mine, name="gather_obj")
    assert got == [{"rank": r, "payload": "x" * (100 * r)} for r in range(hvd.size())]
    assert hvd.allgather_object(None) == [None] * hvd.size()


def test_broadcast_object_root_out_of_range_fails_on_every_rank():
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        hvd.broadcast_object("x", root_rank=hvd.size(), name="obj_bad_root")
    message = str(info.value)
    assert "obj_bad_root" in message
    assert re.search("root rank %d is out of range for %d ranks" % (hvd.size(), hvd.size()), message)
