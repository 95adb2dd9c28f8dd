"""Soak: a small model trained for many steps (default 10,000) on every rank,
tracking resident memory, open file descriptors and threads after warm-up
and at the end. Exits non-zero when memory grows more than 50 MB or the
descriptor or thread count grows.

Every --detour-every steps (default 100) the ranks also leave the cached
steady state the way real jobs do, so leaks there show up too: a shape
mismatch that fails on every rank, an allgather whose row counts change,
and a join() in which one rank runs out of data a step early.

    tfringrun -np 2 python benchmarks/soak.py
Data: synthetic (random tensors, fixed seed).
"""
import argparse
import os
import sys
import time

import numpy as np
import tensorflow as tf

import tf_ring as hvd
from bench_util import print_table


def process_figures():
    with open("/proc/self/status") as f:
        status = dict(line.split(":", 1) for line in f if ":" in line)
    rss_mb = int(status["VmRSS"].split()[0]) / 1024.0
    threads = int(status["Threads"])
    fds = len(os.listdir("/proc/self/fd"))
    return rss_mb, fds, threads


def detour(i):
    """The non-steady-state paths: an error, a renegotiation, a join."""
    me, size = hvd.rank(), hvd.size()
    bad_shape = [3] if me == size - 1 else [2]
    try:
        hvd.allreduce(tf.ones(bad_shape), name="soak_mismatch")
        raise SystemExit("soak: the mismatched allreduce did not fail")
    except tf.errors.FailedPreconditionError:
        pass
    rows = 1 + (i + me) % 3  # a new set of row counts every time
    gathered = hvd.allgather(tf.ones([rows, 4]), name="soak_gather")
    assert gathered.shape[0] == sum(1 + (i + q) % 3 for q in range(size))
    if me != 0:  # rank 0 has no data for this step and joins at once
        hvd.allreduce(tf.ones([8]), op=hvd.Sum, name="soak_uneven")
    assert hvd.join() in range(1, size) or size == 1


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10000)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--detour-every", type=int, default=100,
                        help="steps between error / renegotiation / join detours; 0: none")
    args = parser.parse_args()
    hvd.init()
    rng = np.random.default_rng(hvd.rank())
    x = tf.constant(rng.normal(size=(32, 64)).astype(np.float32))
    y = tf.constant(rng.integers(0, 10, size=32))
    model = tf.keras.Sequential([tf.keras.Input((64,)), tf.keras.layers.Dense(128, activation="relu"),
                                 tf.keras.layers.Dense(10)])
    opt = tf.keras.optimizers.SGD(0.01)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return hvd.allreduce(loss, name="soak_loss")

    start = time.time()
    detours = 0
    for i in range(args.steps):
        step()
        if args.detour_every and (i + 1) % args.detour_every == 0:
            detour(i)
            detours += 1
        if i + 1 == args.warmup:
            warm = process_figures()
            warm_time = time.time()
    end = process_figures()
    elapsed = time.time() - warm_time
    per_rank = hvd.allgather_object((hvd.rank(), warm, end))
    rows, ok = [], True
    for rank, (rss0, fd0, th0), (rss1, fd1, th1) in per_rank:
        grew = rss1 - rss0
        ok = ok and grew < 50 and fd1 <= fd0 and th1 <= th0
        rows.append([rank, "%.1f" % rss0, "%.1f" % rss1, "%+.1f" % grew, "%d -> %d" % (fd0, fd1),
                     "%d -> %d" % (th0, th1)])
    print_table("Soak: %d steps and %d detours on %d ranks, %.0f steps/s after warm-up (%d steps); "
                "total %.0f s" % (args.steps, detours, hvd.size(), (args.steps - args.warmup) / elapsed,
                                  args.warmup, time.time() - start),
                ["rank", "RSS MB after warm-up", "RSS MB at end", "growth MB", "open fds", "threads"],
                rows)
    stats = hvd.stats()
    if hvd.rank() == 0:
        print("engine: %d cycles, %d negotiations, %d cache hits, %d tensors"
              % (stats["cycles"], stats["negotiations"], stats["cache_hits"], stats["tensors"]))
        print("soak %s" % ("PASSED" if ok else "FAILED: growth past the limits"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
