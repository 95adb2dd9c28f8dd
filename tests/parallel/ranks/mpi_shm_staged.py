"""The staged shared-memory allreduce (every rank on one host, the default
path): results compared exactly with every rank's known input combined in
rank order with NumPy, at the default chunk and at a 64 KB chunk that cuts
each tensor into many chunks, so both of a rank's buffers are reused. The
last local pass writes the shared copy and the output in one sweep where
nothing follows it (float32/float64, integers without scaling); the other
cases (float16, integer Average, integer scaling) reduce, scale and copy in
turn; both must give the rank-order result."""
import os

import numpy as np
import pytest
import tensorflow as tf

import tf_ring as hvd
from helpers import all_inputs, rank_input, rank_order

CHUNKS = [None, 64 << 10]  # None: the default


@pytest.fixture(scope="module", params=CHUNKS, ids=["default_chunk", "64KB_chunk"], autouse=True)
def staged_engine(request):
    if hvd.local_size() != hvd.size():
        pytest.skip("the shared-memory allreduce needs every rank on one host")
    hvd.shutdown()
    os.environ["TF_RING_SHM_SINGLE_COPY"] = "0"
    if request.param is None:
        os.environ.pop("TF_RING_SHM_CHUNK_BYTES", None)
    else:
        os.environ["TF_RING_SHM_CHUNK_BYTES"] = str(request.param)
    hvd.init()
    yield request.param
    for name in ("TF_RING_SHM_SINGLE_COPY", "TF_RING_SHM_CHUNK_BYTES"):
        os.environ.pop(name, None)  # conftest restarts the engine


CASES = [(op, dtype) for dtype in (tf.float32, tf.float64, tf.int32, tf.int64, tf.uint8)
         for op in (hvd.Sum, hvd.Min, hvd.Max, hvd.Product)]


@pytest.mark.parametrize("op,dtype", CASES, ids=lambda c: getattr(c, "name", str(c)))
def test_rank_order_result(op, dtype):
    # 300,001 elements: not a multiple of the rank count, so slices differ.
    low, high = (1, 3) if op == hvd.Product else (0 if dtype == tf.uint8 else -8, 8)
    inputs = all_inputs([300_001], dtype, seed=3, low=low, high=high)
    out = hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=op, name="st_one").numpy()
    np.testing.assert_array_equal(out, rank_order(inputs, op))


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
def test_float_average_is_the_scaled_rank_order_sum(dtype):
    # 6 MB of float32: more than one default chunk. The engine scales by
    # 1/size in the tensor's own precision after the sum, as NumPy does here.
    np_dtype = dtype.as_numpy_dtype
    inputs = all_inputs([1_500_007], dtype, seed=6)
    out = hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=hvd.Average, name="st_avg").numpy()
    want = rank_order(inputs, hvd.Sum) * np_dtype(1.0 / hvd.size())
    np.testing.assert_array_equal(out, want.astype(np_dtype))


def test_float16_sum_and_average():
    inputs = all_inputs([140_001], tf.float16, seed=5, low=-2, high=2)
    total = rank_order(inputs, hvd.Sum)
    out = hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=hvd.Sum, name="st_half").numpy()
    np.testing.assert_array_equal(out, total)
    avg = hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=hvd.Average, name="st_half_avg").numpy()
    want = (total.astype(np.float32) * np.float32(1.0 / hvd.size())).astype(np.float16)
    np.testing.assert_array_equal(avg, want)


def test_integer_average_divides_exactly():
    inputs = [np.arange(200_000, dtype=np.int64) * 3 + 7 * r for r in range(hvd.size())]
    out = hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=hvd.Average, name="st_iavg").numpy()
    np.testing.assert_array_equal(out, sum(inputs) // hvd.size())


def test_integer_postscale_truncates_as_before():
    inputs = all_inputs([100_003], tf.int32, seed=8)
    out = hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=hvd.Sum, postscale_factor=0.5,
                        name="st_iscale").numpy()
    want = np.trunc(rank_order(inputs, hvd.Sum).astype(np.float64) * 0.5).astype(np.int32)
    np.testing.assert_array_equal(out, want)


def test_prescale_and_postscale_with_input_and_output_aliased():
    # A prescale works on a copy in the output, so each rank's own slice is
    # read from, and written to, the same buffer in the one-sweep pass.
    inputs = all_inputs([150_001], tf.float64, seed=4)
    out = hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=hvd.Sum, prescale_factor=0.5,
                        postscale_factor=3.0, name="st_scaled").numpy()
    want = rank_order([x * 0.5 for x in inputs], hvd.Sum) * 3.0
    np.testing.assert_array_equal(out, want)


def test_fused_batch_of_odd_sizes_crosses_slices_chunks_and_tensors():
    sizes = [1 + (i * 7919) % 40_000 for i in range(37)]
    per_rank = [[rank_input(r, [n], tf.float32, seed=10 + i) for i, n in enumerate(sizes)]
                for r in range(hvd.size())]
    outs = hvd.grouped_allreduce([tf.constant(x) for x in per_rank[hvd.rank()]],
                                 op=hvd.Average, name="st_fused")
    scale = np.float32(1.0 / hvd.size())
    for i, out in enumerate(outs):
        want = rank_order([per_rank[r][i] for r in range(hvd.size())], hvd.Sum) * scale
        np.testing.assert_array_equal(out.numpy(), want, err_msg="tensor %d" % i)


def test_in_a_tf_function():
    inputs = all_inputs([2_000_003], tf.float32, seed=12)

    @tf.function
    def step(x):
        return hvd.allreduce(x, op=hvd.Sum, name="st_fn")

    for _ in range(2):  # the second call reuses both buffers from the first's state
        out = step(tf.constant(inputs[hvd.rank()])).numpy()
        np.testing.assert_array_equal(out, rank_order(inputs, hvd.Sum))
