"""Collectives inside loops and conditionals of a tf.function (no XLA).

TensorFlow runs a lowered while loop's iterations in parallel (10 at a time
by default), so one collective op is in flight for several iterations at
once; each iteration's run must get its own name, the same on every rank.
Every rank computes the expected values itself with NumPy from all ranks'
inputs (each rank's inputs come from a seed of its rank)."""
import time

import numpy as np
import pytest
import tensorflow as tf

import tf_ring as hvd
from helpers import within

N = 12  # more iterations than parallel_iterations' default (10)


def data(rank, shape, seed=0):
    return np.random.default_rng(1000 * seed + rank).normal(size=shape).astype(np.float32)


def every_rank(shape, seed=0):
    return [data(k, shape, seed) for k in range(hvd.size())]


QUICK = 30.0  # seconds: a hang or an error that waits for a stall fails the test


def test_autograph_for_in_tf_range():
    x = data(hvd.rank(), (N, 5))

    @tf.function
    def f(x):
        acc = tf.zeros(5)
        for i in tf.range(N):
            acc += hvd.allreduce(x[i], op=hvd.Sum)
        return acc

    want = sum(a.sum(axis=0) for a in every_rank((N, 5)))
    for _ in range(2):  # a second call reuses the iterations' names
        np.testing.assert_allclose(f(tf.constant(x)).numpy(), want, rtol=1e-5, atol=1e-5)


def test_while_loop_with_default_parallel_iterations_and_a_name():
    x = data(hvd.rank(), (N, 3), seed=1)

    @tf.function
    def f(x):
        def body(i, acc, gathered):
            acc += hvd.allreduce(x[i], op=hvd.Average, name="loop.avg")
            gathered += tf.reduce_sum(hvd.allgather(x[i:i + 1], name="loop.gather"), axis=0)
            return i + 1, acc, gathered
        _, acc, gathered = tf.while_loop(lambda i, *_: i < N, body, (0, tf.zeros(3), tf.zeros(3)))
        return acc, gathered

    xs = every_rank((N, 3), seed=1)
    acc, gathered = f(tf.constant(x))
    np.testing.assert_allclose(acc.numpy(), sum(xs).sum(axis=0) / hvd.size(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gathered.numpy(), sum(xs).sum(axis=0), rtol=1e-5, atol=1e-5)


def test_nested_loops():
    x = data(hvd.rank(), (4, 6, 2), seed=2)

    @tf.function
    def f(x):
        acc = tf.zeros(2)
        for i in tf.range(4):
            for j in tf.range(6):
                acc += hvd.allreduce(x[i, j] * tf.cast(i + 1, tf.float32), op=hvd.Sum, name="nested")
        return acc

    weights = np.arange(1, 5, dtype=np.float32)[:, None, None]
    want = sum((a * weights).sum(axis=(0, 1)) for a in every_rank((4, 6, 2), seed=2))
    np.testing.assert_allclose(f(tf.constant(x)).numpy(), want, rtol=1e-5, atol=1e-4)


def test_a_cond_inside_a_loop():
    x = data(hvd.rank(), (N, 4), seed=3)

    @tf.function
    def f(x):
        acc = tf.zeros(4)
        for i in tf.range(N):
            if i % 3 == 0:
                acc += hvd.allreduce(x[i], op=hvd.Sum, name="cond.even")
            else:
                acc += hvd.allreduce(x[i], op=hvd.Max, name="cond.odd")
        return acc

    xs = np.stack(every_rank((N, 4), seed=3))  # [rank, i, 4]
    summed, largest = xs.sum(axis=0), xs.max(axis=0)
    want = sum(summed[i] if i % 3 == 0 else largest[i] for i in range(N))
    np.testing.assert_allclose(f(tf.constant(x)).numpy(), want, rtol=1e-5, atol=1e-5)


def linear_grad(w, x, y):
    """Gradient of mean((x @ w - y)^2) with respect to w, in NumPy."""
    return 2.0 / len(x) * x.T @ (x @ w - y)


def test_gradient_accumulation_over_micro_batches():
    micro, batch, lr = 5, 4, 0.05
    xs, ys = every_rank((micro, batch, 3), seed=4), every_rank((micro, batch, 1), seed=5)
    w0 = data(0, (3, 1), seed=6)
    w = tf.Variable(w0)

    @tf.function
    def step(x, y):
        total = tf.zeros_like(w)
        for m in tf.range(micro):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(x[m], w) - y[m]))
            tape = hvd.DistributedGradientTape(tape)
            total += tape.gradient(loss, w)
        w.assign_sub(lr * total / micro)

    r = hvd.rank()
    step(tf.constant(xs[r]), tf.constant(ys[r]))
    want = sum(np.mean([linear_grad(w0, xs[k][m], ys[k][m]) for k in range(hvd.size())], axis=0)
               for m in range(micro))
    np.testing.assert_allclose(w.numpy(), w0 - lr * want / micro, rtol=1e-5, atol=1e-5)


def test_a_hundred_training_steps_in_one_tf_function():
    steps, lr = 100, 0.02
    x, y = every_rank((8, 3), seed=7), every_rank((8, 1), seed=8)
    w0 = data(0, (3, 1), seed=9)
    w = tf.Variable(w0)

    @tf.function
    def train(x, y):
        for _ in tf.range(steps):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
            grad = hvd.DistributedGradientTape(tape).gradient(loss, w)
            w.assign_sub(lr * grad)

    train(tf.constant(x[hvd.rank()]), tf.constant(y[hvd.rank()]))
    want = w0.astype(np.float64)
    for _ in range(steps):
        want = want - lr * np.mean([linear_grad(want, x[k], y[k]) for k in range(hvd.size())], axis=0)
    np.testing.assert_allclose(w.numpy(), want, rtol=1e-4, atol=1e-5)


def test_gradient_through_a_loop_with_a_collective_inside():
    """tape.gradient of a loop whose body sums over ranks: the gradient loop
    runs the allreduce's gradient (an allreduce) in each of its iterations."""
    x = data(hvd.rank(), (N, 3), seed=10)
    w = tf.Variable(np.ones(3, np.float32))

    @tf.function
    def grad(x):
        with tf.GradientTape() as tape:
            total = tf.zeros(3)
            for i in tf.range(N):
                total += hvd.allreduce(w * x[i], op=hvd.Sum, name="inner")
            loss = tf.reduce_sum(total)
        return hvd.DistributedGradientTape(tape).gradient(loss, w)

    # d loss / d w on rank k: size() * sum_i x_k[i]; the tape averages over ranks.
    want = sum(a.sum(axis=0) for a in every_rank((N, 3), seed=10))
    np.testing.assert_allclose(grad(tf.constant(x)).numpy(), want, rtol=1e-5, atol=1e-4)


def test_a_loop_reached_through_a_wrapper_on_one_rank_and_directly_on_another():
    """Rank 0 calls `micro` through an outer tf.function (inlined into it),
    the others call it directly; rank 0 also runs a tf.while_loop of its own
    before (no collective in it). The program's collectives are the same on
    every rank, so their names must be: the loop is named after the
    collectives inside it, not after where TensorFlow inlined it."""
    x = data(hvd.rank(), (4, 3), seed=11)

    @tf.function
    def micro(x):
        if hvd.rank() == 0:  # traced on rank 0 only: shifts the loops' node names
            x = tf.while_loop(lambda i, v: i < 2, lambda i, v: (i + 1, v * 1.0), (0, x))[1]
        total = tf.zeros(3)
        for i in tf.range(4):
            total += hvd.allreduce(x[i], op=hvd.Sum, name="wrapped.micro")
        return total

    @tf.function
    def wrapper(x):
        return micro(x) * 1.0

    run = wrapper if hvd.rank() == 0 else micro
    want = sum(a.sum(axis=0) for a in every_rank((4, 3), seed=11))
    for _ in range(2):
        got = within(QUICK, lambda: run(tf.constant(x)), "the wrapped loop")
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


def fails_on_every_rank_quickly(fn, *phrases):
    start = time.monotonic()
    with pytest.raises(tf.errors.OpError) as failed:
        within(QUICK, fn, "the out-of-step loop")
    message = str(failed.value)
    assert time.monotonic() - start < QUICK, time.monotonic() - start
    for phrase in phrases:
        assert phrase in message, message
    return message


def test_unequal_trip_counts_fail_every_rank_naming_the_loop():
    """Rank 0 runs the loop 3 times, the others 2, then all go on to a
    collective after the loop: rank 0 waits in the loop's third iteration,
    which no other rank reaches, while they wait after the loop. Every rank
    fails within seconds saying the ranks ran the loop a different number of
    times (before: one stall warning after 60 s, then a hang)."""
    x = data(hvd.rank(), (3,), seed=12)

    @tf.function
    def f(x, n):
        acc = tf.zeros(3)
        for _ in tf.range(n):
            acc += hvd.allreduce(x, op=hvd.Sum, name="trips.in")
        return hvd.allreduce(acc, op=hvd.Sum, name="trips.after")

    both = sum(every_rank((3,), seed=12))
    np.testing.assert_allclose(within(QUICK, lambda: f(tf.constant(x), tf.constant(2))).numpy(),
                               2 * hvd.size() * both, rtol=1e-5, atol=1e-5)
    trips = 3 if hvd.rank() == 0 else 2
    others = "ranks 1, 2" if hvd.size() == 3 else "rank 1"
    message = fails_on_every_rank_quickly(lambda: f(tf.constant(x), tf.constant(trips)),
                                          "a different number of times", "trips.in", "rank 0",
                                          others)
    assert "trips.after" in message, message
    # In step again: the same function with equal counts.
    np.testing.assert_allclose(within(QUICK, lambda: f(tf.constant(x), tf.constant(2))).numpy(),
                               2 * hvd.size() * both, rtol=1e-5, atol=1e-5)


def test_collectives_that_differ_by_rank_inside_a_loop_fail_every_rank():
    """A loop whose collective is named differently on rank 0 than on the
    others (a program that really differs): every rank fails within
    seconds, naming both tensors and the ranks, instead of stalling."""
    name = "differ.zero" if hvd.rank() == 0 else "differ.rest"
    x = data(hvd.rank(), (2,), seed=13)

    @tf.function
    def f(x):
        acc = tf.zeros(2)
        for _ in tf.range(2):
            acc += hvd.allreduce(x, op=hvd.Sum, name=name)
        return acc

    fails_on_every_rank_quickly(lambda: f(tf.constant(x)), "differ.zero", "differ.rest", "rank 0")
    y = tf.constant(x)
    got = within(QUICK, lambda: tf.function(
        lambda t: hvd.allreduce(t, op=hvd.Sum, name="differ.after"))(y))
    np.testing.assert_allclose(got.numpy(), sum(every_rank((2,), seed=13)), rtol=1e-5, atol=1e-5)
