"""The staged shared-memory allreduce's chunk, chosen per allreduce
(cc/common/transport/shm_cache_probe.cc): an allreduce larger than one
4 MiB area first measures how fast a cache line moves between the local
ranks' cores, and stages 1 MiB chunks where they share a cache, 4 MiB
otherwise.

The measurement's answer is forced here (TF_RING_TEST_SHM_SHARED_CACHE, read
by local rank 0 only) so both chunk sizes run on any machine, and left to
the measurement once. Results are compared exactly with every rank's input
combined in rank order with NumPy, and stats()["shm_small_chunk_batches"]
must count exactly the allreduces that took the small chunks: those larger
than one area, when the answer is "shared" and the host has a CPU for every
local rank (with fewer, a ping would wait for a time slice, so the engine
never measures). A chunk size the user set is never changed.
"""
import os

import numpy as np
import pytest
import tensorflow as tf

import tf_ring as hvd
from helpers import all_inputs, rank_order

AREA = 4 << 20  # bytes: the default chunk, one area of the segment
ANSWERS = ["1", "0", None]  # None: what the measurement says


def probe_allowed(members):
    """Whether the CPUs the member ranks may run on (the union of their
    affinity masks) are at least as many as they are: computed here,
    independently of the engine."""
    masks = hvd.allgather_object(sorted(os.sched_getaffinity(0)), name="cc_affinity")
    cpus = set()
    for rank in members:
        cpus.update(masks[rank])
    return len(members) <= len(cpus)


def small_chunk_batches(process_set=None):
    return hvd.stats(process_set=process_set)["shm_small_chunk_batches"]


@pytest.fixture(scope="module", params=ANSWERS, ids=["shared", "not_shared", "measured"], autouse=True)
def answer(request):
    if hvd.local_size() != hvd.size():
        pytest.skip("the staged shared-memory allreduce needs every rank on one host")
    hvd.shutdown()
    os.environ["TF_RING_SHM_SINGLE_COPY"] = "0"
    os.environ.pop("TF_RING_SHM_CHUNK_BYTES", None)
    if request.param is None:
        os.environ.pop("TF_RING_TEST_SHM_SHARED_CACHE", None)
    else:
        os.environ["TF_RING_TEST_SHM_SHARED_CACHE"] = request.param
    hvd.init()
    yield request.param
    for name in ("TF_RING_SHM_SINGLE_COPY", "TF_RING_TEST_SHM_SHARED_CACHE"):
        os.environ.pop(name, None)  # conftest restarts the engine


def expected_small(answer, probed, allowed):
    """The allreduces that must have taken small chunks, or None where the
    measurement decides (any number from 0 to `probed`)."""
    if not allowed:
        return 0
    return None if answer is None else probed * int(answer)


def check_count(answer, before, probed):
    got = small_chunk_batches() - before
    want = expected_small(answer, probed, probe_allowed(range(hvd.size())))
    if want is None:
        assert 0 <= got <= probed
    else:
        assert got == want


# (elements, dtype, op): at and around one area, and several areas.
CASES = [
    (AREA // 4, tf.float32, hvd.Sum),           # exactly one area: one chunk, no measurement
    (AREA // 4 + 1, tf.float32, hvd.Sum),       # one element over: measured
    (6 * AREA // 4 + 3, tf.float32, hvd.Sum),   # 24 MB and an odd tail
    (3 * AREA // 8 + 5, tf.float64, hvd.Max),
    (2 * AREA // 4 + 7, tf.int32, hvd.Min),
]


@pytest.mark.parametrize("elements,dtype,op", CASES, ids=lambda c: getattr(c, "name", str(c)))
def test_rank_order_result_and_count(answer, elements, dtype, op):
    inputs = all_inputs([elements], dtype, seed=elements % 97)
    before = small_chunk_batches()
    out = hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=op, name="cc_%d" % elements).numpy()
    np.testing.assert_array_equal(out, rank_order(inputs, op))
    check_count(answer, before, 1 if elements * tf.as_dtype(dtype).size > AREA else 0)


def test_average_scales_after_the_rank_order_sum(answer):
    # Average in float16 takes the path that reduces, scales and copies in turn.
    for dtype in (tf.float32, tf.float16):
        np_dtype = dtype.as_numpy_dtype
        inputs = all_inputs([3 * AREA // 2 + 1], dtype, seed=11, low=-2, high=2)
        before = small_chunk_batches()
        out = hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=hvd.Average, name="cc_avg").numpy()
        total = rank_order(inputs, hvd.Sum)
        if dtype == tf.float16:
            want = (total.astype(np.float32) * np.float32(1.0 / hvd.size())).astype(np.float16)
        else:
            want = total * np_dtype(1.0 / hvd.size())
        np.testing.assert_array_equal(out, want)
        check_count(answer, before, 1)


def test_a_fused_batch_is_measured_once(answer):
    # Five tensors, 10 MB together: one fused batch, one measurement.
    sizes = [AREA // 8 + 3, AREA // 4, 5, AREA // 16 + 1, AREA // 4 + 9]
    inputs = [all_inputs([n], tf.float32, seed=i) for i, n in enumerate(sizes)]
    before = small_chunk_batches()
    outs = hvd.grouped_allreduce([tf.constant(x[hvd.rank()]) for x in inputs], op=hvd.Sum, name="cc_group")
    for got, x in zip(outs, inputs):
        np.testing.assert_array_equal(got.numpy(), rank_order(x, hvd.Sum))
    check_count(answer, before, 1)


def test_many_large_allreduces_in_a_row(answer):
    # Back to back: each measurement's pings must not be taken for the last one's.
    inputs = all_inputs([AREA // 4 + 4099], tf.float32, seed=5)
    want = rank_order(inputs, hvd.Sum)
    before = small_chunk_batches()
    for i in range(12):
        out = hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=hvd.Sum, name="cc_row").numpy()
        np.testing.assert_array_equal(out, want, err_msg="allreduce %d" % i)
    check_count(answer, before, 12)


def test_a_process_set_measures_in_its_own_segment(answer):
    members = [0, 1]
    allowed = probe_allowed(members)  # collective: before the sets part ways
    hvd.shutdown()
    ps = hvd.ProcessSet(members)
    hvd.init(process_sets=[ps])
    try:
        if ps.included():
            inputs = all_inputs([AREA // 4 + 17], tf.float32, seed=9)[:len(members)]
            before = small_chunk_batches(ps)
            out = hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=hvd.Sum, name="cc_set",
                                process_set=ps).numpy()
            np.testing.assert_array_equal(out, rank_order(inputs, hvd.Sum))
            got, want = small_chunk_batches(ps) - before, expected_small(answer, 1, allowed)
            assert got == want if want is not None else 0 <= got <= 1
            assert small_chunk_batches() == 0  # the global set ran nothing that large
    finally:
        hvd.barrier(name="cc_set_done")


def test_a_chunk_size_the_user_set_is_kept(answer):
    hvd.shutdown()
    os.environ["TF_RING_SHM_CHUNK_BYTES"] = str(AREA)
    try:
        hvd.init()
        inputs = all_inputs([3 * AREA // 4 + 1], tf.float32, seed=13)
        out = hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=hvd.Sum, name="cc_user").numpy()
        np.testing.assert_array_equal(out, rank_order(inputs, hvd.Sum))
        assert small_chunk_batches() == 0
    finally:
        os.environ.pop("TF_RING_SHM_CHUNK_BYTES", None)
