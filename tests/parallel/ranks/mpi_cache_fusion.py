"""Response cache, tensor fusion, the batching window and stats(): results
must not depend on them, and the counters must show them working."""
import os

import numpy as np
import pytest
import tensorflow as tf

import tf_ring as hvd
from helpers import all_inputs


def reinit(**env):
    """Restarts the engine with TF_RING_* settings (read at init)."""
    hvd.shutdown()
    for key in ("TF_RING_CACHE_CAPACITY", "TF_RING_FUSION_THRESHOLD", "TF_RING_CYCLE_TIME"):
        os.environ.pop(key, None)
    os.environ.update({k: str(v) for k, v in env.items()})
    hvd.init()


@pytest.fixture(autouse=True)
def default_engine():
    yield
    # Every rank has read its counters before any rank restarts the engine:
    # a faster rank's shutdown is a negotiation, and a slower rank still
    # between its last collective and its stats() would count it (a barrier
    # outside the engine, which counts nothing).
    from mpi4py import MPI
    MPI.COMM_WORLD.Barrier()
    reinit()


def delta(before, after):
    return {k: after[k] - before[k] for k in before}


MIXED = [(tf.float32, hvd.Sum), (tf.float32, hvd.Sum), (tf.int32, hvd.Sum), (tf.int64, hvd.Max),
         (tf.float64, hvd.Average), (tf.int32, hvd.Sum), (tf.float32, hvd.Min), (tf.int64, hvd.Max)]


def mixed_step():
    """A step that all-reduces, all-gathers and broadcasts tensors of mixed
    dtypes and ops in one graph, plus the expected values."""
    size, rank = hvd.size(), hvd.rank()
    inputs = [all_inputs((64 + 8 * i,), dtype, seed=50 + i) for i, (dtype, _) in enumerate(MIXED)]

    @tf.function
    def step(xs):
        reduced = [hvd.allreduce(x, op=op, name="mixed_%d" % i) for i, (x, (_, op)) in
                   enumerate(zip(xs, MIXED))]
        gathered = [hvd.allgather(tf.fill((rank + 1, 2), tf.cast(rank, d)), name="mixed_ag_%d" % i)
                    for i, d in enumerate([tf.int32, tf.int32, tf.float32])]
        bcast = [hvd.broadcast(x, root_rank=size - 1, name="mixed_bc_%d" % i) for i, x in enumerate(xs[:3])]
        return reduced, gathered, bcast

    def expected():
        out = []
        for inp, (dtype, op) in zip(inputs, MIXED):
            stack = np.stack(inp).astype(np.float64)
            value = {hvd.Sum: stack.sum(0), hvd.Max: stack.max(0), hvd.Min: stack.min(0),
                     hvd.Average: stack.mean(0)}[op]
            out.append(value)
        return out

    feed = [tf.constant(inp[rank]) for inp in inputs]
    return step, feed, expected(), inputs


def run_mixed(step, feed):
    reduced, gathered, bcast = step(feed)
    return ([r.numpy() for r in reduced], [g.numpy() for g in gathered], [b.numpy() for b in bcast])


def check_mixed(results, expected, inputs):
    reduced, gathered, bcast = results
    size = hvd.size()
    for got, want, (dtype, _) in zip(reduced, expected, MIXED):
        if dtype.is_integer:
            np.testing.assert_array_equal(got, want.astype(got.dtype))
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5)
    rows = np.concatenate([np.full((r + 1, 2), r) for r in range(size)])
    for g in gathered:
        np.testing.assert_array_equal(g, rows)
    for b, inp in zip(bcast, inputs[:3]):
        np.testing.assert_array_equal(b, inp[size - 1])


def test_steady_state_uses_cache_not_negotiation():
    step, feed, expected, inputs = mixed_step()
    for _ in range(3):
        run_mixed(step, feed)  # warm-up: first step negotiates, later ones hit
    before = hvd.stats()
    for _ in range(5):
        check_mixed(run_mixed(step, feed), expected, inputs)
    d = delta(before, hvd.stats())
    assert d["negotiations"] == 0, d
    assert d["cache_misses"] == 0, d
    assert d["cache_hits"] == 5 * 14, d
    assert d["tensors"] == 5 * 14, d


def test_cache_off_gives_identical_results_and_negotiates_every_time():
    step, feed, expected, inputs = mixed_step()
    with_cache = run_mixed(step, feed)
    reinit(TF_RING_CACHE_CAPACITY=0)
    before = hvd.stats()
    without_cache = run_mixed(step, feed)
    d = delta(before, hvd.stats())
    assert d["cache_hits"] == 0 and d["cache_misses"] == 14 and d["negotiations"] >= 1, d
    check_mixed(without_cache, expected, inputs)
    for a, b in zip(with_cache[0] + with_cache[1] + with_cache[2],
                    without_cache[0] + without_cache[1] + without_cache[2]):
        np.testing.assert_array_equal(a, b)


def test_shape_change_invalidates_and_stays_correct():
    rank, size = hvd.rank(), hvd.size()
    for step_index, length in enumerate([3, 3, 5, 5, 3, 1]):
        before = hvd.stats()
        x = tf.fill((length,), float(rank + step_index))
        got = hvd.allreduce(x, op=hvd.Sum, name="changing_shape")
        want = sum(r + step_index for r in range(size))
        np.testing.assert_allclose(got.numpy(), np.full(length, want))
        d = delta(before, hvd.stats())
        changed = step_index in (0, 2, 4, 5)
        assert d["cache_misses"] == (1 if changed else 0), (step_index, d)
        assert d["cache_hits"] == (0 if changed else 1), (step_index, d)


def test_dtype_change_under_same_name():
    for dtype in (tf.float32, tf.int32, tf.float32):
        got = hvd.allreduce(tf.ones(4, dtype), op=hvd.Sum, name="changing_dtype")
        assert got.dtype == dtype
        np.testing.assert_array_equal(got.numpy(), np.full(4, hvd.size()))


def test_tiny_cache_evicts_the_least_recently_used_and_stays_correct():
    """A cache of 2 entries (set by hand, so it never grows): a name still in
    it hits, an evicted one misses and is negotiated again, and every
    result is right either way."""
    reinit(TF_RING_CACHE_CAPACITY=2)

    def calls(*names):
        before = hvd.stats()
        for name in names:
            i = int(name.rsplit("_", 1)[1])
            got = hvd.allreduce(tf.constant([float(i + hvd.rank())]), op=hvd.Sum, name=name)
            assert got.numpy()[0] == sum(i + r for r in range(hvd.size()))
        d = delta(before, hvd.stats())
        return d["cache_hits"], d["cache_misses"]

    # Two names fit: their second round hits.
    assert calls("evict_0", "evict_1", "evict_0", "evict_1") == (2, 2)
    # A third name evicts the least recently used (evict_0): evict_1 still
    # hits, evict_0 misses, and its return evicts evict_2 (used before evict_1).
    assert calls("evict_2", "evict_1", "evict_0", "evict_1", "evict_2") == (2, 3)
    # Five names cycling through two entries: each is evicted before it
    # comes back, so none hits.
    assert calls(*["evict_%d" % i for _ in range(3) for i in range(5)]) == (0, 15)


def test_fused_equals_unfused_bit_for_bit():
    reinit(TF_RING_CYCLE_TIME=20)  # 20 ms window: the whole step lands in one cycle
    step, feed, expected, inputs = mixed_step()
    before = hvd.stats()
    fused = run_mixed(step, feed)
    d = delta(before, hvd.stats())
    assert d["fused_batches"] >= 1, d
    check_mixed(fused, expected, inputs)

    reinit(TF_RING_FUSION_THRESHOLD=0, TF_RING_CYCLE_TIME=20)
    step, feed, expected, inputs = mixed_step()
    before = hvd.stats()
    unfused = run_mixed(step, feed)
    assert delta(before, hvd.stats())["fused_batches"] == 0
    for a, b in zip(fused[0] + fused[1] + fused[2], unfused[0] + unfused[1] + unfused[2]):
        np.testing.assert_array_equal(a, b)


def test_tensors_above_threshold_run_alone():
    reinit(TF_RING_FUSION_THRESHOLD=4096, TF_RING_CYCLE_TIME=20)
    sizes = [10, 20, 4000, 30, 2000]  # float32: 40 B .. 16 KB; two exceed 4 KB
    inputs = [all_inputs((n,), tf.float32, seed=n) for n in sizes]

    @tf.function
    def step(xs):
        return [hvd.allreduce(x, op=hvd.Sum, name="thr_%d" % i) for i, x in enumerate(xs)]

    before = hvd.stats()
    outs = step([tf.constant(inp[hvd.rank()]) for inp in inputs])
    d = delta(before, hvd.stats())
    for out, inp in zip(outs, inputs):
        np.testing.assert_allclose(out.numpy(), np.sum(inp, axis=0), rtol=1e-5)
    assert d["tensors"] == 5
    # The three small ones fuse into one batch; the two big ones run alone.
    assert d["fused_batches"] == 1, d


def test_stats_bytes_and_tensors():
    before = hvd.stats()
    hvd.allreduce(tf.ones(1000, tf.float64), op=hvd.Sum, name="count_bytes")
    hvd.broadcast(tf.ones(10, tf.int32), root_rank=0, name="count_bytes_bc")
    d = delta(before, hvd.stats())
    assert d["tensors"] == 2
    assert d["bytes"] == 8000 + 40
    assert d["cycles"] >= 1
    assert set(hvd.stats()) >= {"cycles", "negotiations", "cache_hits", "cache_misses",
                                "fused_batches", "tensors", "bytes"}


def test_rank_0s_fusion_threshold_counts_on_every_rank():
    # The last rank alone asks for no fusion: it must still fuse as rank 0
    # does, or the grouped sums mix up (and the job hangs).
    last, me = hvd.size() - 1, hvd.rank()
    hvd.shutdown()
    if me == last:
        os.environ["TF_RING_FUSION_THRESHOLD"] = "0"
    try:
        hvd.init()
    finally:
        os.environ.pop("TF_RING_FUSION_THRESHOLD", None)
    ranks = np.arange(hvd.size())
    for _ in range(2):
        a, b = hvd.grouped_allreduce([tf.fill([3], float(hvd.rank() + 1)),
                                      tf.fill([5], float(10 * (hvd.rank() + 1)))],
                                     op=hvd.Sum, name="agreed_fusion")
        np.testing.assert_array_equal(a.numpy(), np.full(3, float((ranks + 1).sum())))
        np.testing.assert_array_equal(b.numpy(), np.full(5, float((10 * (ranks + 1)).sum())))
    params = hvd.engine_params()
    assert params["fusion_threshold"] == 64 << 20
    assert params["settings"]["TF_RING_FUSION_THRESHOLD"] is None  # rank 0 left it unset
    assert "TF_RING_CACHE_CAPACITY" in params["settings"]
    assert hvd.allgather_object(params, name="agreed_params") == [params] * hvd.size()


LOOP_STEPS, LOOP_TENSORS = 48, 22  # 1,056 loop names per call: more than the default 1,024


def loop_of_names():
    """A tf.function whose loop grouped-allreduces 22 tensors 48 times, as
    Keras's steps_per_execution=48 does with 22 gradients: each iteration's
    collectives are names of their own. Returns it, its feed and the
    expected result (each iteration: the ranks' mean, plus the iteration's
    index, so after 48: the inputs' mean + 0 + 1 + ... + 47)."""
    shapes = [(4 + i % 3,) for i in range(LOOP_TENSORS)]
    inputs = [all_inputs(s, tf.float32, seed=70 + i) for i, s in enumerate(shapes)]
    size = float(hvd.size())

    @tf.function
    def loop(ts):
        for i in tf.range(LOOP_STEPS):
            sums = hvd.grouped_allreduce(ts, op=hvd.Sum, name="loop_names")
            ts = [s / size + tf.cast(i, tf.float32) for s in sums]
        return ts

    feed = [tf.constant(inp[hvd.rank()]) for inp in inputs]
    added = sum(range(LOOP_STEPS))
    return loop, feed, [np.mean(inp, axis=0) + added for inp in inputs]


def run_loop_calls(calls):
    """Warm-up calls, then `calls` checked ones: their stats() delta."""
    loop, feed, want = loop_of_names()
    for _ in range(3):
        loop(feed)
    before = hvd.stats()
    for _ in range(calls):
        for got, expected in zip(loop(feed), want):
            np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5)
    return delta(before, hvd.stats())


def test_a_loop_with_more_names_than_the_cache_grows_it_until_they_hit():
    """Issue 49: with the names of one call not fitting in the cache, each
    was evicted just before it came back, so no call ever hit (every
    iteration negotiated through rank 0). Left unset, the cache grows (the
    same on every rank) and the calls after warm-up hit every time."""
    d = run_loop_calls(2)
    assert d["cache_hits"] == 2 * LOOP_STEPS * LOOP_TENSORS, d
    assert d["cache_misses"] == 0, d


def test_a_cache_size_set_by_hand_is_kept_and_rank_0_warns_once_naming_it(capfd):
    """TF_RING_CACHE_CAPACITY set: the size is the user's, kept (the calls
    miss, and stay right), and rank 0 says once which setting to raise."""
    reinit(TF_RING_CACHE_CAPACITY=1024)
    capfd.readouterr()
    d = run_loop_calls(2)
    assert d["cache_hits"] == 0 and d["cache_misses"] == 2 * LOOP_STEPS * LOOP_TENSORS, d
    hvd.allreduce(tf.ones(1), name="cache_warning_flushed")  # rank 0's log written by now
    warned = capfd.readouterr().err.count("Raise TF_RING_CACHE_CAPACITY")
    assert warned == (1 if hvd.rank() == 0 else 0), warned
