"""A tape training step with and without jit_compile, with and without
tf_ring's gradient allreduce, in one run (issue 21's numbers). The four
configurations alternate for --rounds rounds and each reports the median
round, so that drift on a shared machine falls on all of them alike (both
ranks time their "alone" step at the same moment, sharing the cores).

    tfringrun -np 2 python benchmarks/xla_step.py

Rows: the step on this process alone (no collectives), jit_compile False
and True, which gives the speed-up XLA brings to the step on one process;
then the same step with DistributedGradientTape (the gradients' grouped
allreduce inside the compiled step when jit_compile is True). "kept" is the
time XLA saves with tf_ring divided by the time it saves alone (goal: at
least 0.9). Synthetic data; an MLP of --width units.
"""
import argparse
import os
import statistics
import time

import numpy as np
import tensorflow as tf

import tf_ring as hvd
from bench_util import print_table, timed


def make_step(weights, jit, distributed):
    @tf.function(jit_compile=jit)
    def step(x, y):
        with tf.GradientTape() as tape:
            h = x
            for i in range(0, len(weights) - 2, 2):
                h = tf.nn.relu(tf.matmul(h, weights[i]) + weights[i + 1])
            logits = tf.matmul(h, weights[-2]) + weights[-1]
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        if distributed:
            tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, weights)
        for w, g in zip(weights, grads):
            w.assign_sub(0.01 * g)
        return loss
    return step


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--repeats", type=int, default=200, help="timed steps per configuration")
    p.add_argument("--rounds", type=int, default=5,
                   help="the four configurations alternate this many times (median of rounds)")
    p.add_argument("--threads", type=int, default=0,
                   help="TensorFlow intra- and inter-op threads per rank (default: TensorFlow's, "
                        "one per core)")
    args = p.parse_args()
    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    threads = args.threads or os.cpu_count()
    hvd.init()
    rng = np.random.default_rng(0)
    dims = [256] + [args.width] * args.layers + [10]
    weights = []
    for a, b in zip(dims[:-1], dims[1:]):
        weights.append(tf.Variable(rng.standard_normal((a, b)).astype(np.float32) * 0.05))
        weights.append(tf.Variable(np.zeros(b, np.float32)))
    data = np.random.default_rng(1 + hvd.rank())
    x = tf.constant(data.standard_normal((args.batch, 256)).astype(np.float32))
    y = tf.constant(data.integers(0, 10, args.batch).astype(np.int32))

    configs = [(distributed, jit) for distributed in (False, True) for jit in (False, True)]
    steps = {c: make_step(weights, c[1], c[0]) for c in configs}
    first, samples, batches = {}, {c: [] for c in configs}, {c: 0.0 for c in configs}
    per_round = max(20, args.repeats // args.rounds)
    for c in configs:
        start = time.perf_counter()
        steps[c](x, y)  # compiles
        first[c] = time.perf_counter() - start
    for _ in range(args.rounds):
        for c in configs:
            before = hvd.stats()["fused_batches"]
            median, _ = timed(lambda: steps[c](x, y), per_round)
            batches[c] += (hvd.stats()["fused_batches"] - before) / (per_round + 3) / args.rounds
            samples[c].append(median)
    times = {c: statistics.median(samples[c]) for c in configs}
    rows = []
    for distributed, jit in configs:
        c = (distributed, jit)
        label = ("tf_ring tape, %d ranks" % hvd.size()) if distributed else "this process alone"
        rows.append([label, str(jit), "%.3f" % (times[c] * 1e3),
                     " ".join("%.2f" % (s * 1e3) for s in samples[c]), "%.2f" % first[c],
                     "%.2f" % batches[c] if distributed else "-"])
    alone = times[False, False] - times[False, True]
    ring = times[True, False] - times[True, True]
    print_table("MLP tape step %s, batch %d per rank, %d TensorFlow threads per rank (median of %d "
                "rounds of %d steps)" % (dims, args.batch, threads, args.rounds, per_round),
                ["step", "jit_compile", "ms", "each round ms", "first call s", "fused batches/step"],
                rows)
    if hvd.rank() == 0:
        print("XLA speed-up alone %.2fx, with tf_ring %.2fx; time saved with tf_ring / alone: "
              "kept %.2f (goal >= 0.90)" % (times[False, False] / times[False, True],
                                            times[True, False] / times[True, True],
                                            ring / alone if alone > 0 else float("nan")))


if __name__ == "__main__":
    main()
