"""The shared-memory allreduce's path, chosen per allreduce
(cc/common/transport/shm_cache_probe.cc): an allreduce larger than one
4 MiB area first measures how fast a cache line moves between the local
ranks' cores, and stages 1 MiB chunks where they share a cache; where they
are apart it reads the peers' tensors directly (single copy, the default
TF_RING_SHM_SINGLE_COPY=auto) or, with TF_RING_SHM_SINGLE_COPY=0, stages
4 MiB chunks.

The measurement's answer is forced here (TF_RING_TEST_SHM_SHARED_CACHE, read
by local rank 0 only: 1 shared, 0 apart) so every path runs on any machine,
and left to the measurement once, each with both single-copy settings.
Results are compared exactly with every rank's input combined in rank order
with NumPy, and stats()["shm_small_chunk_batches"] and
["shm_single_copy_batches"] must count exactly the allreduces that took
those paths: those larger than one area, when the answer says so and the
host has a CPU for every local rank (with fewer, a ping would wait for a
time slice, so the engine never measures), and for single copy only where
the kernel lets the ranks read each other's memory (probed here without
tf_ring). A chunk size the user set is never changed.
"""
import os

import numpy as np
import pytest
import tensorflow as tf

import tf_ring as hvd
from helpers import all_inputs, peers_readable, rank_order

AREA = 4 << 20  # bytes: the default chunk, one area of the segment
# (forced answer, TF_RING_SHM_SINGLE_COPY): answer None is what the
# measurement says; single copy None is unset, the default ("auto").
SETTINGS = [(a, c) for c in ("0", None) for a in ("1", "0", None)]
IDS = ["%s-%s" % ({"1": "shared", "0": "apart", None: "measured"}[a], "staged" if c == "0" else "auto")
       for a, c in SETTINGS]


def probe_allowed(members):
    """Whether the CPUs the member ranks may run on (the union of their
    affinity masks) are at least as many as they are: computed here,
    independently of the engine."""
    masks = hvd.allgather_object(sorted(os.sched_getaffinity(0)), name="cc_affinity")
    cpus = set()
    for rank in members:
        cpus.update(masks[rank])
    return len(members) <= len(cpus)


def path_counts(process_set=None):
    """(batches in small chunks, batches read by single copy)."""
    stats = hvd.stats(process_set=process_set)
    return stats["shm_small_chunk_batches"], stats["shm_single_copy_batches"]


class Setting:
    def __init__(self, answer, single_copy, readable):
        self.answer, self.single_copy, self.readable = answer, single_copy, readable


@pytest.fixture(scope="module", params=SETTINGS, ids=IDS, autouse=True)
def answer(request):
    if hvd.local_size() != hvd.size():
        pytest.skip("the shared-memory allreduce needs every rank on one host")
    forced, single_copy = request.param
    readable = peers_readable()
    hvd.shutdown()
    os.environ.pop("TF_RING_SHM_CHUNK_BYTES", None)
    for name, value in (("TF_RING_SHM_SINGLE_COPY", single_copy), ("TF_RING_TEST_SHM_SHARED_CACHE", forced)):
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    hvd.init()
    yield Setting(forced, single_copy, readable)
    for name in ("TF_RING_SHM_SINGLE_COPY", "TF_RING_TEST_SHM_SHARED_CACHE"):
        os.environ.pop(name, None)  # conftest restarts the engine


def expected_paths(setting, probed, allowed):
    """The allreduces that must have taken small chunks and single copy, each
    None where the measurement decides (any number from 0 to `probed`)."""
    if not allowed:
        return 0, 0
    if setting.answer is None:
        small = None
    else:
        small = probed if setting.answer == "1" else 0
    if setting.single_copy == "0" or not setting.readable:
        direct = 0
    elif setting.answer is None:
        direct = None
    else:
        direct = probed if setting.answer == "0" else 0
    return small, direct


def check_counts(setting, before, probed, allowed=None, process_set=None):
    if allowed is None:
        allowed = probe_allowed(range(hvd.size()))
    got = [after - b for after, b in zip(path_counts(process_set), before)]
    for kind, count, want in zip(("small chunks", "single copy"), got, expected_paths(setting, probed, allowed)):
        if want is None:
            assert 0 <= count <= probed, kind
        else:
            assert count == want, kind
    assert sum(got) <= probed  # one path per allreduce


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
    before = path_counts()
    out = hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=op, name="cc_%d" % elements).numpy()
    np.testing.assert_array_equal(out, rank_order(inputs, op))
    check_counts(answer, before, 1 if elements * tf.as_dtype(dtype).size > AREA else 0)


def test_average_scales_after_the_rank_order_sum(answer):
    # Average in float16 takes the path that reduces, scales and copies in turn.
    for dtype in (tf.float32, tf.float16):
        np_dtype = dtype.as_numpy_dtype
        inputs = all_inputs([3 * AREA // 2 + 1], dtype, seed=11, low=-2, high=2)
        before = path_counts()
        out = hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=hvd.Average, name="cc_avg").numpy()
        total = rank_order(inputs, hvd.Sum)
        if dtype == tf.float16:
            want = (total.astype(np.float32) * np.float32(1.0 / hvd.size())).astype(np.float16)
        else:
            want = total * np_dtype(1.0 / hvd.size())
        np.testing.assert_array_equal(out, want)
        check_counts(answer, before, 1)


def test_a_fused_batch_is_measured_once(answer):
    # Five tensors, 10 MB together: one fused batch, one measurement.
    sizes = [AREA // 8 + 3, AREA // 4, 5, AREA // 16 + 1, AREA // 4 + 9]
    inputs = [all_inputs([n], tf.float32, seed=i) for i, n in enumerate(sizes)]
    before = path_counts()
    outs = hvd.grouped_allreduce([tf.constant(x[hvd.rank()]) for x in inputs], op=hvd.Sum, name="cc_group")
    for got, x in zip(outs, inputs):
        np.testing.assert_array_equal(got.numpy(), rank_order(x, hvd.Sum))
    check_counts(answer, before, 1)


def test_many_large_allreduces_in_a_row(answer):
    # Back to back: each measurement's pings must not be taken for the last one's.
    inputs = all_inputs([AREA // 4 + 4099], tf.float32, seed=5)
    want = rank_order(inputs, hvd.Sum)
    before = path_counts()
    for i in range(12):
        out = hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=hvd.Sum, name="cc_row").numpy()
        np.testing.assert_array_equal(out, want, err_msg="allreduce %d" % i)
    check_counts(answer, before, 12)


def test_a_process_set_measures_in_its_own_segment(answer):
    members = [0, 1]
    allowed = probe_allowed(members)  # collective: before the sets part ways
    hvd.shutdown()
    ps = hvd.ProcessSet(members)
    hvd.init(process_sets=[ps])
    try:
        if ps.included():
            inputs = all_inputs([AREA // 4 + 17], tf.float32, seed=9)[:len(members)]
            before = path_counts(ps)
            out = hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=hvd.Sum, name="cc_set",
                                process_set=ps).numpy()
            np.testing.assert_array_equal(out, rank_order(inputs, hvd.Sum))
            check_counts(answer, before, 1, allowed=allowed, process_set=ps)
            assert path_counts() == (0, 0)  # the global set ran nothing that large
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
        assert path_counts() == (0, 0)
    finally:
        os.environ.pop("TF_RING_SHM_CHUNK_BYTES", None)
