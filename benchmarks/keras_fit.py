"""Keras model.fit throughput: tf_ring (Keras 3) against MultiWorkerMirroredStrategy (tf_keras).

Model: an MLP of 8 Dense layers 1024 wide (256 inputs, 10 classes), plain SGD,
16 samples per rank per step, synthetic data made in memory. Each side trains
a warm-up and then a few timed windows of the same number of steps in one
fit(); the median window counts, and samples/s counts the samples of all ranks.

Run (2 ranks; the script then starts the 2 MWMS workers itself, after the
tf_ring ranks have stopped, so the two measurements never share the CPUs):

    tfringrun -np 2 python benchmarks/keras_fit.py

MultiWorkerMirroredStrategy cannot run Keras 3 model.fit across processes
(keras-team/keras#20585), so its side uses tf_keras (TF_USE_LEGACY_KERAS=1),
its only working Keras. Each MWMS worker is this script with --mwms-worker.

With --pipeline the batches come from a tf.data pipeline instead of one
batch in memory: each sample is made by a parallel map (num_parallel_calls
AUTOTUNE: TensorFlow's threads on the same cores as the ranks) and
prefetched, the load real training puts beside its collectives
(benchmarks/under_load.py runs it quiet and under load). Rank 0's last line
is `KERAS_FIT {json}` with both rates.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import time

import numpy as np

INPUTS, WIDTH, DEPTH, CLASSES = 256, 1024, 8, 10


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=16, help="per rank")
    parser.add_argument("--warmup-steps", type=int, default=10)
    parser.add_argument("--steps", type=int, default=40, help="timed steps per window")
    parser.add_argument("--windows", type=int, default=3,
                        help="timed windows; the median window is reported (the CPUs may be shared)")
    parser.add_argument("--skip-mwms", action="store_true")
    parser.add_argument("--pipeline", action="store_true",
                        help="feed fit() from a tf.data parallel map with prefetch, not one batch in memory")
    parser.add_argument("--map-passes", type=int, default=96,
                        help="arithmetic passes per sample in --pipeline's map (its CPU cost)")
    parser.add_argument("--mwms-worker", type=int, default=None, help=argparse.SUPPRESS)
    return parser.parse_args()


def build_mlp(keras):
    layers = [keras.Input((INPUTS,))]
    layers += [keras.layers.Dense(WIDTH, activation="relu") for _ in range(DEPTH)]
    layers.append(keras.layers.Dense(CLASSES))
    return keras.Sequential(layers)


def synthetic_batch(rows, seed):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(rows, INPUTS)).astype(np.float32),
            rng.integers(0, CLASSES, size=(rows,)).astype(np.int64))


def make_dataset(tf, rows, seed, pipeline, passes=96):
    """One synthetic batch of `rows` repeated, or (pipeline) batches of
    samples each made by a parallel map: a few passes of arithmetic over its
    features, so the map's threads keep the cores busy as decoding and
    augmentation do."""
    if not pipeline:
        return tf.data.Dataset.from_tensors(synthetic_batch(rows, seed)).repeat()

    def sample(index):
        key = tf.stack([tf.cast(seed, tf.int64), index])
        x = tf.random.stateless_normal((INPUTS,), seed=key)
        for _ in range(passes):  # stand-in for decoding and augmentation
            x = tf.math.tanh(x * 1.01 + tf.math.sin(x))
        y = tf.random.stateless_uniform((), seed=key + 1, maxval=CLASSES, dtype=tf.int64)
        return x, y

    return (tf.data.Dataset.range(1 << 40).map(sample, num_parallel_calls=tf.data.AUTOTUNE)
            .batch(rows).prefetch(tf.data.AUTOTUNE))


def timed_fit(keras, model, dataset, args):
    """Trains warm-up + windows * steps in one fit(); returns the median window's seconds."""
    marks = []

    class Clock(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            done = batch - args.warmup_steps
            if done >= 0 and done % args.steps == 0:
                marks.append(time.perf_counter())

    model.fit(dataset, epochs=1, verbose=0, shuffle=False, callbacks=[Clock()],
              steps_per_epoch=args.warmup_steps + args.windows * args.steps)
    marks.append(time.perf_counter())
    windows = np.diff(marks)
    print("windows (s): %s" % " ".join("%.2f" % w for w in windows), file=sys.stderr, flush=True)
    return float(np.median(windows))


def run_tf_ring(args):
    import tensorflow as tf
    import keras
    import tf_ring.keras as hvd

    hvd.init()
    model = build_mlp(keras)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    dataset = make_dataset(tf, args.batch_size, hvd.rank(), args.pipeline, args.map_passes)
    seconds = timed_fit(keras, model, dataset, args)
    samples_per_s = args.steps * args.batch_size * hvd.size() / seconds
    # The slowest rank decides the job's throughput.
    samples_per_s = float(hvd.allreduce(tf.constant(samples_per_s), op=hvd.Min, name="rate"))
    size, rank = hvd.size(), hvd.rank()
    hvd.shutdown()
    return size, rank, samples_per_s


def run_mwms_worker(args):
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf
    import tf_keras

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    workers = strategy.num_replicas_in_sync
    with strategy.scope():
        model = build_mlp(tf_keras)
        model.compile(optimizer=tf_keras.optimizers.SGD(0.01),
                      loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    # MWMS takes the global batch and gives each worker batch_size rows of it.
    dataset = make_dataset(tf, args.batch_size * workers, args.mwms_worker, args.pipeline, args.map_passes)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    seconds = timed_fit(tf_keras, model, dataset.with_options(options), args)
    print("MWMS_RESULT " + json.dumps({"samples_per_s": args.steps * args.batch_size * workers
                                       / seconds}), flush=True)


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def run_mwms(args, workers):
    """Starts `workers` MWMS processes (this script, --mwms-worker i) and returns samples/s."""
    cluster = {"worker": ["localhost:%d" % p for p in free_ports(workers)]}
    # The workers are plain processes: strip what mpirun put in our environment.
    base_env = {k: v for k, v in os.environ.items()
                if not k.startswith(("OMPI_", "PMIX_", "PRTE_", "OPAL_"))}
    procs = []
    for index in range(workers):
        env = dict(base_env, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2",
                   TF_CONFIG=json.dumps({"cluster": cluster,
                                         "task": {"type": "worker", "index": index}}))
        cmd = [sys.executable, os.path.abspath(__file__), "--mwms-worker", str(index),
               "--batch-size", str(args.batch_size), "--warmup-steps", str(args.warmup_steps),
               "--steps", str(args.steps), "--windows", str(args.windows)]
        cmd += ["--pipeline", "--map-passes", str(args.map_passes)] if args.pipeline else []
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=600)
            lines = [l for l in out.splitlines() if l.startswith("MWMS_RESULT ")]
            if proc.returncode != 0 or not lines:
                raise RuntimeError("MWMS worker failed (exit %s):\n%s" % (proc.returncode,
                                                                         err[-3000:]))
            results.append(json.loads(lines[-1].split(" ", 1)[1])["samples_per_s"])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    return min(results)


def main():
    args = parse_args()
    if args.mwms_worker is not None:
        run_mwms_worker(args)
        return
    size, rank, tf_ring_rate = run_tf_ring(args)
    if rank != 0:
        return
    rows = [("tf_ring, Keras 3", tf_ring_rate)]
    if not args.skip_mwms:
        rows.append(("MultiWorkerMirroredStrategy, tf_keras", run_mwms(args, size)))
    print("\nKeras fit, MLP %dx%d, batch %d per rank, %d ranks, median of %d windows of %d steps%s"
          % (DEPTH, WIDTH, args.batch_size, size, args.windows, args.steps,
             ", tf.data parallel map" if args.pipeline else ""))
    print("| %-38s | %10s |" % ("setup", "samples/s"))
    print("|%s|%s|" % ("-" * 40, "-" * 12))
    for name, rate in rows:
        print("| %-38s | %10.1f |" % (name, rate))
    if len(rows) == 2:
        print("tf_ring / MWMS: %.2fx" % (rows[0][1] / rows[1][1]))
    print("KERAS_FIT " + json.dumps({name: rate for name, rate in rows}), flush=True)


if __name__ == "__main__":
    main()
