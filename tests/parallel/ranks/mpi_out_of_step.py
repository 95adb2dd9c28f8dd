"""Ranks out of step after a refusal: a rank runs two collectives of one
name together, and its queue refuses the second at once. The refusal fails
only what that rank cannot take part in (the other ranks' matching run of
the refused collective), on every rank that submits it, at once; whatever
the refusing rank can still run (the first of the two, later collectives,
however late another rank reaches them) runs as usual. Every wait here is
bounded (helpers.within), so a hang fails the test instead of the job."""
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

import tf_ring as hvd
from helpers import within

QUICK = 20.0  # seconds: far below any stall timeout, far above a loaded cycle


def reduce_fn():
    return tf.function(lambda t, name: hvd.allreduce(t, op=hvd.Sum, name=name))


def want(base):
    return sum(base + k for k in range(hvd.size()))


def refuse_on_rank_zero(step, x, name):
    """Rank 0: `name` on two threads, the second while the first is in
    flight (the others submit it 1 s later). Returns (first's result, the
    refusal)."""
    out = {}

    def call(key):
        try:
            out[key] = step(x, name).numpy()
        except tf.errors.OpError as e:
            out[key] = e

    step.get_concrete_function(x, name)  # traced before either runs
    first = threading.Thread(target=call, args=("first",), daemon=True)
    first.start()
    time.sleep(0.3)  # the first is in flight now: the second is refused
    call("second")
    first.join(QUICK)
    assert not first.is_alive(), "rank 0 still waits in %r" % name
    return out["first"], out["second"]


def test_a_refusal_and_a_late_rank_leave_the_next_collectives_alone():
    """Issue 49's report: rank 0 runs 'dup' on two threads (one refused and
    caught, the other completes with the others); rank 0 submits 'next' at
    0.5 s, the last rank at 3.5 s; then all run 'next2'. Before, 2 s after
    the refusal rank 0's 'next' failed ("still waiting 2 s after that"), the
    late rank then waited in 'next' alone and both hung in 'next2'."""
    step = reduce_fn()
    base = np.arange(4, dtype=np.float32)
    x = tf.constant(base + hvd.rank())
    start = time.monotonic()
    late = {0: 0.5, hvd.size() - 1: 3.5}.get(hvd.rank(), 2.0)
    if hvd.rank() == 0:
        first, refused = refuse_on_rank_zero(step, x, "oos.dup")
        assert isinstance(refused, tf.errors.OpError) and "already in flight" in str(refused), refused
        assert not isinstance(first, Exception), first
        np.testing.assert_allclose(first, want(base))
    else:
        time.sleep(1.0)
        np.testing.assert_allclose(within(QUICK, lambda: step(x, "oos.dup"), "'oos.dup'").numpy(),
                                   want(base))
    time.sleep(max(0.0, late - (time.monotonic() - start)))
    for name in ("oos.next", "oos.next2"):
        got = within(QUICK, lambda: step(x, name), repr(name))
        np.testing.assert_allclose(got.numpy(), want(base))


def test_the_refused_run_fails_the_matching_run_on_the_other_ranks():
    """Rank 0 refuses its second 'oos.twice'; the other ranks run it twice,
    one after the other. Their first pairs with rank 0's first; their
    second is the run rank 0 refused, so it fails at once on each of them,
    with rank 0's reason, instead of waiting for a run that never comes."""
    step = reduce_fn()
    base = np.arange(3, dtype=np.float32)
    x = tf.constant(base + hvd.rank())
    if hvd.rank() == 0:
        first, refused = refuse_on_rank_zero(step, x, "oos.twice")
        np.testing.assert_allclose(first, want(base))
        assert "already in flight" in str(refused), refused
    else:
        time.sleep(1.0)
        np.testing.assert_allclose(within(QUICK, lambda: step(x, "oos.twice")).numpy(), want(base))
        start = time.monotonic()
        with pytest.raises(tf.errors.OpError) as failed:
            within(QUICK, lambda: step(x, "oos.twice"), "the second 'oos.twice'")
        message = str(failed.value)
        assert time.monotonic() - start < QUICK
        assert "rank 0 refused allreduce of tensor 'oos.twice'" in message, message
        assert "already in flight" in message, message


def test_the_ranks_run_in_step_afterwards():
    base = np.arange(3, dtype=np.float32)
    got = within(QUICK, lambda: reduce_fn()(tf.constant(base + hvd.rank()), "oos.after"))
    np.testing.assert_allclose(got.numpy(), want(base))
