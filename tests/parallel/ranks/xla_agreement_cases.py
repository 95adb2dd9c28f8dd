"""Compiled (jit_compile=True) steps agreeing across ranks: program order
that differs by rank, the response cache, a rank that joined, stalls
inside a compiled step, conds and loops, threads started in opposite
orders. Driven by tests/parallel/test_xla.py on 2 and 3 ranks, in one
launch with xla_cases.py (the compiled collectives themselves)."""
import re

import numpy as np
import pytest
import tensorflow as tf

import tf_ring as hvd
from xla_inputs import all_inputs, block_of, rank_input

hvd.init()


def test_program_order_differing_by_rank_still_agrees():
    # Each tf_ring call blocks until every rank submitted it, so the compiled
    # calls must run in one order everywhere. They are chained in the order
    # tf2xla compiles the graph (name-stable), not in Python's order.
    @tf.function(jit_compile=True)
    def step(a, b, c):
        if hvd.rank() % 2 == 0:
            s = hvd.allreduce(a, op=hvd.Sum, name="xla.order.ar")
            g = hvd.allgather(b, name="xla.order.ag")
            r = hvd.reducescatter(c, op=hvd.Sum, name="xla.order.rs")
        else:
            r = hvd.reducescatter(c, op=hvd.Sum, name="xla.order.rs")
            g = hvd.allgather(b, name="xla.order.ag")
            s = hvd.allreduce(a, op=hvd.Sum, name="xla.order.ar")
        return s, g, r

    shape_c = (hvd.size() + 1, 2)  # uneven blocks: the HLO differs by rank
    a, b = rank_input(tf.float32, hvd.rank()), rank_input(tf.int32, hvd.rank(), (2,))
    c = rank_input(tf.float32, hvd.rank(), shape_c)
    for _ in range(3):
        s, g, r = step(a, b, c)
        np.testing.assert_allclose(s.numpy(), np.stack(all_inputs(tf.float32)).sum(0))
        np.testing.assert_array_equal(
            g.numpy(), np.concatenate([rank_input(tf.int32, q, (2,)).numpy()
                                       for q in range(hvd.size())]))
        full = sum(rank_input(tf.float32, q, shape_c).numpy() for q in range(hvd.size()))
        np.testing.assert_allclose(r.numpy(), full[block_of(shape_c[0], hvd.rank(), hvd.size())])
    hlo = step.experimental_get_compiler_ir(a, b, c)(stage="hlo")
    assert hlo.count("custom_call_target=\"tf_ring_collective\"") == 3


def test_compiled_allgather_and_reducescatter_hit_the_cache():
    @tf.function(jit_compile=True)
    def step(x):
        return (hvd.allgather(x, name="xla.cache.ag"),
                hvd.reducescatter(x, op=hvd.Sum, name="xla.cache.rs"))

    x = rank_input(tf.float32, hvd.rank(), (hvd.size(), 2))
    want_ag = np.concatenate([rank_input(tf.float32, r, (hvd.size(), 2)).numpy()
                              for r in range(hvd.size())])
    step(x)  # compile, negotiate, cache
    before = hvd.stats()["cache_hits"]
    for _ in range(20):
        gathered, _ = step(x)
        np.testing.assert_array_equal(gathered.numpy(), want_ag)
    assert hvd.stats()["cache_hits"] - before >= 30  # two tensors a step, most from the cache


def test_compiled_collectives_after_a_rank_joined():
    """Rank 0 joins; the others' compiled allreduce runs without it (it adds
    zeros, as outside XLA), and their compiled allgather, sized for every
    rank's rows, fails cleanly instead of returning a wrong-sized buffer."""
    me, size = hvd.rank(), hvd.size()
    if me != 0:
        x = rank_input(tf.float32, me)
        summed = tf.function(lambda t: hvd.allreduce(t, op=hvd.Sum, name="xla.join.sum"),
                             jit_compile=True)
        want = np.sum(all_inputs(tf.float32)[1:], axis=0)
        np.testing.assert_allclose(summed(x).numpy(), want)
        gathered = tf.function(lambda t: hvd.allgather(t, name="xla.join.gather"),
                               jit_compile=True)
        with pytest.raises(tf.errors.InvalidArgumentError) as info:
            gathered(x)
        message = str(info.value)
        assert "xla.join.gather" in message and "join" in message, message
    assert hvd.join() in range(1, size)


def _restart_engine_together():
    """shutdown() + init() with the new settings, once every rank is done
    with the engine before: a rank still starting the previous engine would
    otherwise take this rank's shutdown as its own (seen when this file's
    stall tests ran first, alone)."""
    from mpi4py import MPI  # tf_ring has initialised MPI by now
    MPI.COMM_WORLD.Barrier()
    hvd.shutdown()
    hvd.init()


def test_stall_inside_a_compiled_step_is_warned(capfd):
    """The last rank reaches the compiled step 2 s late: rank 0's stall
    inspector names the compiled collective and the missing rank while the
    others wait inside the custom call, and the step then completes."""
    import os
    import time
    last = hvd.size() - 1
    os.environ["TF_RING_STALL_CHECK_TIME_SECONDS"] = "0.2"
    try:
        _restart_engine_together()
        step = tf.function(lambda t: hvd.allreduce(t, op=hvd.Sum, name="xla.stalled"),
                           jit_compile=True)
        if hvd.rank() == last:
            time.sleep(2.0)
        np.testing.assert_allclose(step(tf.ones([4])).numpy(), np.full(4, float(hvd.size())))
        if hvd.rank() == 0:
            seen = capfd.readouterr().err
            assert "stall: tensor 'xla.stalled'" in seen, seen[-2000:]
            # Rank 0 may still be compiling at the first check; some warning
            # must name the late rank among those missing.
            missing = [set(int(r) for r in m.split(", ")) for m in re.findall(
                r"stall: tensor 'xla.stalled'.*missing on rank\(s\) ([0-9, ]+)\.", seen)]
            assert any(last in m for m in missing), seen[-2000:]
    finally:
        os.environ.pop("TF_RING_STALL_CHECK_TIME_SECONDS")
        hvd.shutdown()
        hvd.init()


def test_stall_shutdown_inside_a_compiled_step_fails_it_on_every_rank():
    """TF_RING_STALL_SHUTDOWN_TIME_SECONDS inside XLA: the last rank never
    runs the compiled step; the others, waiting inside its custom call, fail
    with the stall's reason naming the tensor, and the last rank's engine
    stops too, saying why. Nobody hangs."""
    import os
    import time
    last = hvd.size() - 1
    os.environ["TF_RING_STALL_CHECK_TIME_SECONDS"] = "0.2"
    os.environ["TF_RING_STALL_SHUTDOWN_TIME_SECONDS"] = "1"
    try:
        _restart_engine_together()
        step = tf.function(lambda t: hvd.allreduce(t, op=hvd.Sum, name="xla.never_on_last"),
                           jit_compile=True)
        start = time.monotonic()
        if hvd.rank() != last:
            with pytest.raises(tf.errors.OpError) as failed:
                step(tf.ones([4]))
            message = failed.value.message
        else:
            while hvd.is_initialized() and time.monotonic() - start < 60:
                time.sleep(0.05)
            with pytest.raises(tf.errors.OpError) as failed:
                hvd.allreduce(tf.ones([4]), name="xla.after_the_stall")
            message = failed.value.message
            assert "shut down" in message, message
        assert "stalled collective" in message and "xla.never_on_last" in message, message
        assert time.monotonic() - start < 30
    finally:
        os.environ.pop("TF_RING_STALL_CHECK_TIME_SECONDS")
        os.environ.pop("TF_RING_STALL_SHUTDOWN_TIME_SECONDS")
        hvd.shutdown()
        hvd.init()


def test_cond_branches_in_opposite_orders_fail_together_not_stall():
    """A tf.cond whose predicate differs by rank, whose branches run the same
    two allreduces in opposite orders: each compiled call waits for every
    rank, so rank 0 waits in one while the others wait in the other. The
    coordinator sees the crossed waits and fails both on every rank, naming
    them, within seconds (no stall timeout is set here: before, a hang)."""
    import time

    @tf.function(jit_compile=True)
    def step(a, b, same_order):
        def a_first():
            x = hvd.allreduce(a, op=hvd.Sum, name="xla.cross.a")
            return x, hvd.allreduce(b, op=hvd.Sum, name="xla.cross.b")

        def b_first():
            y = hvd.allreduce(b, op=hvd.Sum, name="xla.cross.b")
            return hvd.allreduce(a, op=hvd.Sum, name="xla.cross.a"), y
        return tf.cond(same_order, a_first, b_first)

    a, b = rank_input(tf.float32, hvd.rank()), rank_input(tf.float32, hvd.rank(), (5,))
    want_a = np.stack(all_inputs(tf.float32)).sum(0)
    want_b = sum(rank_input(tf.float32, q, (5,)).numpy() for q in range(hvd.size()))
    for pred in (True, False):  # the same branch on every rank: right either way
        x, y = step(a, b, tf.constant(pred))
        np.testing.assert_allclose(x.numpy(), want_a)
        np.testing.assert_allclose(y.numpy(), want_b)
    start = time.monotonic()
    with pytest.raises(tf.errors.OpError) as failed:
        step(a, b, tf.constant(hvd.rank() == 0))
    message = failed.value.message
    assert "different orders" in message, message
    assert "xla.cross.a" in message and "xla.cross.b" in message, message
    assert time.monotonic() - start < 15, time.monotonic() - start
    x, y = step(a, b, tf.constant(True))  # in step again afterwards
    np.testing.assert_allclose(x.numpy(), want_a)
    np.testing.assert_allclose(y.numpy(), want_b)


def test_loops_and_a_cond_inside_jit_compile():
    """Inside jit_compile: collectives before, inside and after a loop,
    a tf.cond with the same predicate everywhere inside it, and a nested
    loop; compared with NumPy."""
    n, m = 5, 3
    x = np.random.default_rng(hvd.rank()).normal(size=(n, m, 4)).astype(np.float32)
    every = [np.random.default_rng(k).normal(size=(n, m, 4)).astype(np.float32) for k in range(hvd.size())]

    @tf.function(jit_compile=True)
    def step(x):
        before = hvd.allreduce(x[0, 0], op=hvd.Sum, name="xla.loop.before")
        acc = tf.zeros(4)
        for i in tf.range(n):
            if i % 2 == 0:
                acc += hvd.allreduce(x[i, 0], op=hvd.Sum, name="xla.loop.even")
            else:
                acc += hvd.allreduce(x[i, 0], op=hvd.Max, name="xla.loop.odd")
            for j in tf.range(1, m):
                acc += hvd.allreduce(x[i, j], op=hvd.Sum, name="xla.loop.inner")
        after = hvd.allreduce(acc, op=hvd.Average, name="xla.loop.after")
        return before, after

    stacked = np.stack(every)  # [rank, i, j, 4]
    summed, largest = stacked.sum(0), stacked.max(0)
    acc = sum((summed[i, 0] if i % 2 == 0 else largest[i, 0]) + summed[i, 1:].sum(0) for i in range(n))
    for _ in range(2):
        before, after = step(tf.constant(x))
        np.testing.assert_allclose(before.numpy(), summed[0, 0], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(after.numpy(), acc, rtol=1e-5, atol=1e-4)


def test_two_threads_started_in_opposite_orders_are_not_a_crossed_wait():
    """Two compiled functions on two threads, started in opposite orders on
    rank 0 and the others, 1.5 s apart: for 1.5 s rank 0 waits in one while
    the others wait in the other, yet both threads will finish. Before, the
    crossed-wait check (1 s) failed all four calls; now it waits
    TF_RING_CROSSED_WAIT_SECONDS (5 by default) and all four complete."""
    import threading
    import time
    one = tf.function(lambda t: hvd.allreduce(t, op=hvd.Sum, name="xla.threads.one"),
                      jit_compile=True)
    two = tf.function(lambda t: hvd.allreduce(t, op=hvd.Sum, name="xla.threads.two"),
                      jit_compile=True)
    a = rank_input(tf.float32, hvd.rank())
    want = np.stack(all_inputs(tf.float32)).sum(0)
    for f in (one, two):  # compiled first, in one order everywhere
        np.testing.assert_allclose(f(a).numpy(), want)
    order = (one, two) if hvd.rank() == 0 else (two, one)
    out = {}

    def call(f):
        try:
            out[f] = f(a).numpy()
        except tf.errors.OpError as e:
            out[f] = e

    threads = [threading.Thread(target=call, args=(f,), daemon=True) for f in order]
    threads[0].start()
    time.sleep(1.5)
    threads[1].start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a compiled call still waits"
    for f in order:
        assert not isinstance(out[f], Exception), str(out[f])
        np.testing.assert_allclose(out[f], want)
