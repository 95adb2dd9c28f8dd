"""Small allreduces inside one host, and the response cache's round through
shared memory.

Up to 64 KB in all, a response is reduced with one barrier: every rank
stages its whole buffer and combines every rank's copy itself, in rank order
(cc/common/collectives/shm/shm_small_allreduce.h). Results are compared
exactly with every rank's known input combined in rank order with NumPy, on
both sides of the 64 KB boundary, so the small and the staged path must
agree bit for bit. Many small responses back to back (one per dtype, so
they do not fuse) reuse both staging buffers in turn while a peer may still
read the previous one.

Every collective here also agrees through the cache round, which goes
through shared memory when all ranks share a host. The module runs twice:
with the default cache (its round fits the segment's slots) and with a
cache too large for them, where the round falls back to MPI.
"""
import os

import numpy as np
import pytest
import tensorflow as tf

import tf_ring as hvd
from helpers import all_inputs, rank_input, rank_order

# 1024: 16 words of bits, inside the slots; 20,000: 313 words, beyond them.
CAPACITIES = ["1024", "20000"]
LIMIT = 64 << 10  # bytes, the small path's limit


@pytest.fixture(scope="module", params=CAPACITIES, ids=["shm_round", "mpi_round"], autouse=True)
def engine_with_cache(request):
    if hvd.local_size() != hvd.size():
        pytest.skip("the small shared-memory allreduce needs every rank on one host")
    hvd.shutdown()
    os.environ["TF_RING_CACHE_CAPACITY"] = request.param
    hvd.init()
    yield request.param
    os.environ.pop("TF_RING_CACHE_CAPACITY", None)  # conftest restarts the engine


CASES = [(op, dtype) for dtype in (tf.float32, tf.float64, tf.int32, tf.uint8, tf.float16)
         for op in (hvd.Sum, hvd.Min, hvd.Max, hvd.Product)]


@pytest.mark.parametrize("op,dtype", CASES, ids=lambda c: getattr(c, "name", str(c)))
def test_rank_order_result_on_both_sides_of_the_limit(op, dtype):
    elem = tf.as_dtype(dtype).size
    low, high = (1, 3) if op == hvd.Product else (0 if dtype == tf.uint8 else -8, 8)
    for elements in (1, 7, 1024, LIMIT // elem, LIMIT // elem + 1, 3 * LIMIT // elem):
        inputs = all_inputs([elements], dtype, seed=elements, low=low, high=high)
        out = hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=op).numpy()
        np.testing.assert_array_equal(out, rank_order(inputs, op), err_msg="%d elements" % elements)


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64, tf.float16])
def test_float_average_is_the_scaled_rank_order_sum(dtype):
    np_dtype = dtype.as_numpy_dtype
    inputs = all_inputs([1001], dtype, seed=21, low=-2, high=2)
    out = hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=hvd.Average).numpy()
    total = rank_order(inputs, hvd.Sum)
    if dtype == tf.float16:  # scaled in float32, rounded once
        want = (total.astype(np.float32) * np.float32(1.0 / hvd.size())).astype(np.float16)
    else:
        want = total * np_dtype(1.0 / hvd.size())
    np.testing.assert_array_equal(out, want.astype(np_dtype))


def test_integer_average_divides_exactly_and_postscale_truncates():
    inputs = [np.arange(500, dtype=np.int64) * 3 + 7 * r for r in range(hvd.size())]
    out = hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=hvd.Average).numpy()
    np.testing.assert_array_equal(out, sum(inputs) // hvd.size())
    ints = all_inputs([777], tf.int32, seed=22)
    out = hvd.allreduce(tf.constant(ints[hvd.rank()]), op=hvd.Sum, postscale_factor=0.5).numpy()
    want = np.trunc(rank_order(ints, hvd.Sum).astype(np.float64) * 0.5).astype(np.int32)
    np.testing.assert_array_equal(out, want)


def test_prescale_with_input_and_output_aliased():
    # A prescale works on a copy in the output, so the output is also this
    # rank's input: its own value must come from the staged copy.
    inputs = all_inputs([999], tf.float64, seed=23)
    out = hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=hvd.Sum, prescale_factor=0.5,
                        postscale_factor=3.0).numpy()
    np.testing.assert_array_equal(out, rank_order([x * 0.5 for x in inputs], hvd.Sum) * 3.0)


def test_fused_small_batch_and_a_batch_just_over_the_limit():
    for name, sizes in (("small_batch", [1, 5, 100, 1000, 14000]),  # 60.4 KB of float32
                        ("over_batch", [1, 5, 100, 1000, 15400])):  # 66.0 KB
        per_rank = [[rank_input(r, [n], tf.float32, seed=30 + i) for i, n in enumerate(sizes)]
                    for r in range(hvd.size())]
        outs = hvd.grouped_allreduce([tf.constant(x) for x in per_rank[hvd.rank()]],
                                     op=hvd.Sum, name=name)
        for i, out in enumerate(outs):
            want = rank_order([per_rank[r][i] for r in range(hvd.size())], hvd.Sum)
            np.testing.assert_array_equal(out.numpy(), want, err_msg="%s tensor %d" % (name, i))


def test_small_responses_back_to_back_reuse_both_buffers():
    # Tensors of different dtypes never fuse: each is a response of its own,
    # run one after another in the same cycle, interleaved with a staged
    # one, so each small buffer is rewritten while peers run ahead or lag.
    dtypes = [tf.float32, tf.float64, tf.int32, tf.int64, tf.float16, tf.int16]

    @tf.function
    def step(xs, big):
        outs = [hvd.allreduce(x, op=hvd.Sum, name="b2b_%d" % i) for i, x in enumerate(xs)]
        return outs, hvd.allreduce(big, op=hvd.Sum, name="b2b_big")

    for it in range(30):
        per_rank = [[rank_input(r, [300 + 17 * i], d, seed=100 * it + i, low=-4, high=4)
                     for i, d in enumerate(dtypes)] for r in range(hvd.size())]
        bigs = all_inputs([40_000], tf.float32, seed=it)
        outs, big = step([tf.constant(x) for x in per_rank[hvd.rank()]], tf.constant(bigs[hvd.rank()]))
        for i, out in enumerate(outs):
            want = rank_order([per_rank[r][i] for r in range(hvd.size())], hvd.Sum)
            np.testing.assert_array_equal(out.numpy(), want, err_msg="step %d tensor %d" % (it, i))
        np.testing.assert_array_equal(big.numpy(), rank_order(bigs, hvd.Sum))


def test_eager_fast_path_matches_the_general_path():
    # hvd.allreduce takes a shorter Python path for a plain eager tensor;
    # its results, default op included, must equal an explicitly named call.
    x = tf.constant(rank_input(hvd.rank(), [257], tf.float32, seed=40))
    inputs = all_inputs([257], tf.float32, seed=40)
    fast = hvd.allreduce(x).numpy()  # default op: Average
    named = hvd.allreduce(x, op=hvd.Average, name="general_path").numpy()
    np.testing.assert_array_equal(fast, named)
    np.testing.assert_array_equal(fast, rank_order(inputs, hvd.Sum) * np.float32(1.0 / hvd.size()))
    for op in (hvd.Sum, hvd.Min, hvd.Max, hvd.Product):
        np.testing.assert_array_equal(hvd.allreduce(x, op=op).numpy(), rank_order(inputs, op))
