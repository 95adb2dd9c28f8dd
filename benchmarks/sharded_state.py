"""Sharded optimizer state against the unsharded optimizer: per-rank state
bytes, peak RSS and step time, Adam on an MLP of a few large layers.

    python benchmarks/sharded_state.py [--np 2] [--width 2048] [--layers 2] [--steps 20]

runs one job per column (sharded, unsharded) under tfringrun and prints
both. Peak RSS is the process's high-water mark (ru_maxrss), TensorFlow
included, so only the difference between the columns means something.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time


def _measure(args):
    import numpy as np
    import tensorflow as tf
    import keras
    import tf_ring.keras as hvd
    from tf_ring.keras._sharded_state import own_keys

    hvd.init()
    layers = [keras.Input((args.width,))]
    layers += [keras.layers.Dense(args.width, activation="tanh") for _ in range(args.layers)]
    model = keras.Sequential(layers)
    optimizer = hvd.DistributedOptimizer(keras.optimizers.Adam(1e-4),
                                         shard_state=args.mode == "sharded")
    optimizer.build(model.trainable_variables)
    shared = {id(optimizer.iterations), id(optimizer._learning_rate)}
    state = [v for v in optimizer.variables if id(v) not in shared]
    state_bytes = sum(int(np.prod(v.shape)) * 4 for v in state)
    assert args.mode != "sharded" or {id(v) for v in state} == own_keys(optimizer)
    x = tf.random.stateless_normal((32, args.width), seed=(1, hvd.rank()))

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True)))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    step()  # trace
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    float(model.trainable_variables[0][0, 0])
    seconds = (time.perf_counter() - start) / args.steps
    print("RESULT " + json.dumps({
        "rank": hvd.rank(), "params": model.count_params(), "state_bytes": state_bytes,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "step_s": seconds}), flush=True)


def _run(args, mode):
    command = [sys.executable, "-m", "tf_ring.run", "-np", str(args.np), sys.executable,
               os.path.abspath(__file__), "--mode", mode, "--width", str(args.width),
               "--layers", str(args.layers), "--steps", str(args.steps)]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return sorted((json.loads(line[len("RESULT "):]) for line in out.splitlines()
                   if line.startswith("RESULT ")), key=lambda r: r["rank"])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--mode", choices=["sharded", "unsharded"])
    args = parser.parse_args()
    if args.mode:
        return _measure(args)
    columns = {mode: _run(args, mode) for mode in ("unsharded", "sharded")}
    print("Adam, %d parameters, %d ranks" % (columns["sharded"][0]["params"], args.np))
    print("%-6s %-10s %16s %16s %10s" % ("rank", "mode", "state MiB", "peak RSS MiB",
                                         "step ms"))
    for mode, rows in columns.items():
        for r in rows:
            print("%-6d %-10s %16.1f %16.1f %10.1f" % (
                r["rank"], mode, r["state_bytes"] / 2**20, r["peak_rss_bytes"] / 2**20,
                r["step_s"] * 1e3))


if __name__ == "__main__":
    main()
