"""The single-copy shared-memory allreduce (TF_RING_SHM_SINGLE_COPY=1): the
ranks read each other's tensors with process_vm_readv instead of staging
them. Results are compared with NumPy sums of every rank's known input, and
bit for bit with the staged path on the same inputs."""
import os
import tempfile

import numpy as np
import pytest
import tensorflow as tf

import tf_ring as hvd
from helpers import all_inputs, check_on_root, peers_readable, rank_input, timeline_events

SINGLE_COPY_MIN_BYTES = 256 << 10  # shm_single_copy_allreduce.cc's kMinSingleCopyBytes


def _restart(single_copy):
    hvd.shutdown()
    os.environ["TF_RING_SHM_SINGLE_COPY"] = "1" if single_copy else "0"
    hvd.init()


@pytest.fixture(scope="module", autouse=True)
def single_copy_engine():
    if hvd.local_size() != hvd.size():
        pytest.skip("the shared-memory allreduce needs every rank on one host")
    if not peers_readable():
        pytest.skip("this kernel does not let the ranks read each other's memory "
                    "(process_vm_readv: ptrace rules); the engine then stages instead")
    _restart(True)
    yield
    os.environ.pop("TF_RING_SHM_SINGLE_COPY", None)  # conftest restarts the engine


def _rank_order(inputs, op):
    """Every rank's input combined in rank order in the inputs' own dtype,
    as the engine combines them: exact, not merely close."""
    combine = {hvd.Sum: np.add, hvd.Min: np.minimum, hvd.Max: np.maximum,
               hvd.Product: np.multiply}[op]
    out = inputs[0]
    for x in inputs[1:]:
        out = combine(out, x)
    return out


CASES = [(op, dtype) for dtype in (tf.float32, tf.float64, tf.int32)
         for op in (hvd.Sum, hvd.Min, hvd.Max, hvd.Product)]


@pytest.mark.parametrize("op,dtype", CASES)
def test_one_large_tensor_equals_the_rank_order_result(op, dtype):
    # 300,001 elements: not a multiple of the rank count, so slices differ in size.
    low, high = (1, 3) if op == hvd.Product else (-8, 8)
    inputs = all_inputs([300_001], dtype, seed=3, low=low, high=high)
    out = hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=op, name="sc_one").numpy()
    np.testing.assert_array_equal(out, _rank_order(inputs, op))


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
def test_float_average(dtype):
    inputs = all_inputs([300_001], dtype, seed=6)
    out = hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=hvd.Average, name="sc_avg").numpy()
    want = sum(x.astype(np.float64) for x in inputs) / hvd.size()
    np.testing.assert_allclose(out, want, rtol=0, atol=1e-5 if dtype == tf.float32 else 1e-12)


def test_integer_average_divides_exactly():
    inputs = [np.full(200_000, 7 * hvd.size(), np.int64) + r for r in range(hvd.size())]
    out = hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=hvd.Average, name="sc_iavg").numpy()
    np.testing.assert_array_equal(out, sum(inputs) // hvd.size())


def test_fused_batch_of_odd_sizes_crosses_slices_and_tensors():
    # 37 tensors whose boundaries fall anywhere inside the ranks' slices and
    # the 128 KB pieces: every output element must be its own tensor's sum.
    sizes = [1 + (i * 7919) % 40_000 for i in range(37)]
    assert sum(sizes) * 4 >= SINGLE_COPY_MIN_BYTES
    per_rank = [[rank_input(r, [n], tf.float32, seed=10 + i) for i, n in enumerate(sizes)]
                for r in range(hvd.size())]
    outs = hvd.grouped_allreduce([tf.constant(x) for x in per_rank[hvd.rank()]],
                                 op=hvd.Sum, name="sc_fused")
    for i, out in enumerate(outs):
        want = _rank_order([per_rank[r][i] for r in range(hvd.size())], hvd.Sum)
        np.testing.assert_array_equal(out.numpy(), want, err_msg="tensor %d" % i)


def test_prescale_and_postscale():
    # A prescale works on a copy in the output, so input and output alias:
    # each rank must still read the peers' scaled inputs, not their results.
    inputs = all_inputs([150_000], tf.float64, seed=4)
    out = hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=hvd.Sum, prescale_factor=0.5,
                        postscale_factor=3.0, name="sc_scaled").numpy()
    np.testing.assert_allclose(out, 1.5 * sum(inputs), rtol=0, atol=1e-12)


def test_float16_sum():
    inputs = all_inputs([140_000], tf.float16, seed=5, low=-2, high=2)
    out = hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=hvd.Sum, name="sc_half").numpy()
    np.testing.assert_array_equal(out, _rank_order(inputs, hvd.Sum))


def test_results_are_bit_identical_to_the_staged_path():
    # Both paths combine in rank order, so the same inputs give the same bits.
    sizes = [70_001, 3, 250_000, 12_345]
    mine = [rank_input(hvd.rank(), [n], tf.float32, seed=20 + i) for i, n in enumerate(sizes)]

    def run():
        outs = hvd.grouped_allreduce([tf.constant(x) for x in mine], op=hvd.Sum, name="sc_bits")
        return [o.numpy() for o in outs]

    single = run()
    _restart(False)
    try:
        staged = run()
    finally:
        _restart(True)
    for a, b in zip(single, staged):
        np.testing.assert_array_equal(a, b)


def test_timeline_names_the_path_each_batch_took():
    # Rank 0 writes the timeline: its own temporary directory will do.
    path = os.path.join(tempfile.mkdtemp(), "single_copy.json")
    hvd.start_timeline(path)
    big = hvd.allreduce(tf.ones([SINGLE_COPY_MIN_BYTES // 4]), op=hvd.Sum, name="sc_big")
    small = hvd.allreduce(tf.ones([1000]), op=hvd.Sum, name="sc_small")
    np.testing.assert_array_equal(big.numpy(), hvd.size())
    np.testing.assert_array_equal(small.numpy(), hvd.size())
    hvd.stop_timeline()

    def check():
        _, by_tensor = timeline_events(path)
        transport = {}
        for name, events in by_tensor.items():
            for e in events:
                if "transport" in e.get("args", {}):
                    transport[name.split(".")[0]] = e["args"]["transport"]
        assert any(k.startswith("sc_big") and v == "shm-single-copy" for k, v in transport.items()), transport
        assert any(k.startswith("sc_small") and v == "shm" for k, v in transport.items()), transport

    check_on_root(check, "sc_timeline")
