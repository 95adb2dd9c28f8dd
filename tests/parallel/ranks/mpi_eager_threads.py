"""Unnamed eager collectives from several Python threads at once: each is
named after its op and thread, the same on every rank, so they never clash
("already in flight") and each matches its own thread's peers."""
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

import tf_ring as hvd


def requests_taken():
    """How many of this rank's requests the engine has taken into a cycle."""
    s = hvd.stats()
    return s["cache_hits"] + s["cache_misses"]


def wait_until(condition, what, timeout=60):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for " + what
        time.sleep(0.005)


def run_threads(*targets):
    """Runs each target in its own thread, named by its position so that the
    names (and so the eager ops' automatic names) agree on every rank even
    when earlier tests started different numbers of threads per rank;
    re-raises the first error."""
    errors = []

    def guarded(target):
        try:
            target()
        except BaseException as e:  # noqa: B902 - reported to the main thread
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=(t,), name="collective-%d" % i)
               for i, t in enumerate(targets)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
        assert not t.is_alive(), "a collective thread hung"
    if errors:
        raise errors[0]


def test_a_second_thread_submits_while_the_first_ones_collective_is_pending():
    """Made certain: on every rank but the last, thread B submits while
    thread A's allreduce waits for the last rank, whose A submits only after
    its B has finished. With one shared name per op, B failed (already in
    flight, or matched to the other thread's collective)."""
    size, rank, last = hvd.size(), hvd.rank(), hvd.size() - 1
    b_done = threading.Event()
    results = {}
    before = requests_taken()

    def a():
        if rank == last:
            assert b_done.wait(120)
        results["a"] = hvd.allreduce(tf.fill([3], float(rank)), op=hvd.Sum)

    def b():
        if rank != last:
            wait_until(lambda: requests_taken() > before, "thread A's request")
        results["b"] = hvd.allreduce(tf.fill([5], 10.0 * rank + 1), op=hvd.Sum)
        b_done.set()

    run_threads(a, b)
    np.testing.assert_allclose(results["a"].numpy(), np.full(3, sum(range(size))))
    np.testing.assert_allclose(results["b"].numpy(), np.full(5, sum(10.0 * r + 1 for r in range(size))))


def thread_workload(tag, steps, seen):
    """Every unnamed eager helper, with values that differ by thread, step and rank."""
    size, rank = hvd.size(), hvd.rank()
    for step in range(steps):
        base = 1000.0 * tag + step
        reduced = hvd.allreduce(tf.fill([4 + tag], base + rank), op=hvd.Sum)
        np.testing.assert_allclose(reduced.numpy(), np.full(4 + tag, size * base + sum(range(size))))
        gathered = hvd.allgather(tf.fill([rank + 1, 2], base + rank))
        expected = np.concatenate([np.full((r + 1, 2), base + r) for r in range(size)])
        np.testing.assert_array_equal(gathered.numpy(), expected)
        group = hvd.grouped_allreduce([tf.constant([base * rank]), tf.fill([2, tag + 1], rank)],
                                      op=hvd.Sum)
        np.testing.assert_allclose(group[0].numpy(), [base * sum(range(size))])
        np.testing.assert_array_equal(group[1].numpy(), np.full([2, tag + 1], sum(range(size))))
        root = (step + tag) % size
        got = hvd.broadcast(tf.constant([base, rank]), root_rank=root)
        np.testing.assert_array_equal(got.numpy(), [base, root])
        assert hvd.allgather_object((tag, step, rank)) == [(tag, step, r) for r in range(size)]
        hvd.barrier()
        seen.append(step)


def test_two_threads_run_every_unnamed_eager_collective_concurrently():
    seen = {0: [], 1: []}
    run_threads(lambda: thread_workload(0, 12, seen[0]), lambda: thread_workload(1, 12, seen[1]))
    assert seen == {0: list(range(12)), 1: list(range(12))}


def test_repeated_unnamed_calls_hit_the_response_cache():
    hvd.reset_stats()
    for step in range(5):
        got = hvd.allreduce(tf.fill([6], float(step)), op=hvd.Sum)
        np.testing.assert_allclose(got.numpy(), np.full(6, step * hvd.size()))
    stats = hvd.stats()
    assert (stats["cache_misses"], stats["cache_hits"]) == (1, 4), stats


def test_one_collective_called_from_different_lines_on_different_ranks_still_matches():
    # Horovod code does this; a name taken from the call site would stall it.
    if hvd.rank() == 0:
        got = hvd.broadcast(tf.constant([3.0, 4.0]), root_rank=0)
    else:
        got = hvd.broadcast(tf.zeros([2]), root_rank=0)
    np.testing.assert_array_equal(got.numpy(), [3.0, 4.0])


def test_errors_name_the_op_and_thread():
    bad = tf.ones([2 + (hvd.rank() == hvd.size() - 1)])
    with pytest.raises(tf.errors.OpError) as main:
        hvd.allreduce(bad)
    assert "'allreduce.eager'" in main.value.message, main.value.message
    caught = {}

    def worker():
        with pytest.raises(tf.errors.OpError) as e:
            hvd.allgather(tf.ones([1, 1 + (hvd.rank() == hvd.size() - 1)]))
        caught["message"] = e.value.message

    thread = threading.Thread(target=worker, name="gatherer")
    thread.start()
    thread.join(timeout=120)
    assert "'allgather.eager/gatherer'" in caught["message"], caught
