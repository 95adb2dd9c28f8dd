"""Soak: a small model trained for many steps (default 10,000) on every rank,
tracking resident memory, open file descriptors and threads after warm-up
and at the end. Exits non-zero when memory grows more than 50 MB or the
descriptor or thread count grows.

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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10000)
    parser.add_argument("--warmup", type=int, default=1000)
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
    for i in range(args.steps):
        step()
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
    print_table("Soak: %d steps on %d ranks, %.0f steps/s after warm-up (%d steps); total %.0f s"
                % (args.steps, hvd.size(), (args.steps - args.warmup) / elapsed, args.warmup,
                   time.time() - start),
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
