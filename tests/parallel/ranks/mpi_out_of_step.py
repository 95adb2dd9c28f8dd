"""Ranks out of step: one rank fails a collective at once (here: it runs two
collectives of one name together, which its queue refuses), while the
others wait for collectives it will never submit. The failure reaches every
rank through the coordinator within seconds; without it they would wait
for the stall check (or for ever, with the stall shutdown off, as here)."""
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

import tf_ring as hvd

QUICK = 10.0  # seconds: far below any stall timeout


def test_a_rank_that_fails_at_once_fails_the_others_with_it():
    x = tf.constant(np.arange(4, dtype=np.float32) + hvd.rank())
    step = tf.function(lambda t, name: hvd.allreduce(t, op=hvd.Sum, name=name))
    errors = []

    def in_flight():
        try:
            step(x, "oos.dup")
        except tf.errors.OpError as e:
            errors.append(e)

    start = time.monotonic()
    if hvd.rank() == 0:
        # Two collectives of one name in flight together, on two threads:
        # whichever comes second is refused at once on this rank, and the
        # first fails by the report (rank 1 never submits the name).
        step.get_concrete_function(x, "oos.dup")  # traced before either runs
        threads = [threading.Thread(target=in_flight) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads), "rank 0 still waits in 'oos.dup'"
        assert len(errors) == 2, errors
        messages = sorted(str(e) for e in errors)
        assert all("already in flight" in m for m in messages), messages
        message = next((m for m in messages if "rank 0 failed" in m), messages)
    else:
        # Waits for a tensor rank 0 never submits.
        with pytest.raises(tf.errors.OpError) as failed:
            step(x, "oos.never")
        message = str(failed.value)
    elapsed = time.monotonic() - start
    assert elapsed < QUICK, "rank %d learned of the failure after %.1f s" % (hvd.rank(), elapsed)
    assert "rank 0 failed allreduce of tensor 'oos.dup'" in message, message
    assert "already in flight" in message, message


def test_the_ranks_run_in_step_afterwards():
    time.sleep(3)  # past the coordinator's 2 s grace window after a failure report
    x = np.arange(3, dtype=np.float32) + hvd.rank()
    want = sum(np.arange(3, dtype=np.float32) + k for k in range(hvd.size()))
    got = tf.function(lambda t: hvd.allreduce(t, op=hvd.Sum, name="oos.after"))(tf.constant(x))
    np.testing.assert_allclose(got.numpy(), want)
