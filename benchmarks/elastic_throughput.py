"""What elastic commits cost a Keras fit: training throughput with
tf_ring.keras.elastic.CommitStateCallback committing every batch, every 10
batches, and without elastic state, on the same model in one run.

Model: an MLP 512-2048-2048-10 (5.3M weights, Adam: 64 MB of state to copy
per commit), batch 64 per rank, synthetic data made in memory. The three
configurations alternate in rounds (each round one fit() of each: warm-up
batches, then timed batches); the median round counts, on the slowest rank.

    tfringrun -np 2 python benchmarks/elastic_throughput.py [--rounds 3]

Under plain tfringrun a commit is the in-memory copy plus the host-change
broadcast; under tfringrun's elastic mode local rank 0 also hands each
commit to the tmpfs mirror's writer thread (not measured here).
"""
import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_util  # noqa: E402

CONFIGS = [("no elastic state", None), ("commit every 10 batches", 10),
           ("commit every batch", 1)]


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=5, help="batches before timing, per fit")
    parser.add_argument("--batches", type=int, default=40, help="timed batches per fit")
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    return parser.parse_args()


class BatchClock:
    """Seconds from the end of warm-up batch to the end of the last batch."""

    def __init__(self, keras, warmup):
        outer = self

        class Clock(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                if batch + 1 == warmup:
                    outer.start = time.perf_counter()
                outer.end = time.perf_counter()

        self.callback = Clock()
        self.start = self.end = None


def main():
    args = parse_args()
    import keras
    import tensorflow as tf
    import tf_ring.keras as hvd

    hvd.init()
    rng = np.random.default_rng(hvd.rank())
    steps = args.warmup + args.batches
    x = rng.normal(size=(steps * args.batch_size, 512)).astype(np.float32)
    y = rng.integers(0, 10, size=(steps * args.batch_size,))
    model = keras.Sequential([keras.Input((512,)), keras.layers.Dense(2048, activation="relu"),
                              keras.layers.Dense(2048, activation="relu"), keras.layers.Dense(10)])
    model.compile(hvd.DistributedOptimizer(keras.optimizers.Adam(1e-4)),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    state = hvd.elastic.KerasState(model, batch=0, epoch=0)
    state.sync()
    seconds = {name: [] for name, _ in CONFIGS}
    for _ in range(args.rounds):
        for name, every in CONFIGS:
            clock = BatchClock(keras, args.warmup)
            callbacks = [clock.callback]  # state.sync() above made the weights equal
            if every is not None:
                callbacks.append(hvd.elastic.CommitStateCallback(state, batches_per_commit=every))
            data = tf.data.Dataset.from_tensor_slices((x, y)).batch(args.batch_size)
            model.fit(data, epochs=1, callbacks=callbacks, verbose=0)
            mine = clock.end - clock.start
            slowest = float(hvd.allreduce(tf.constant(mine), op=hvd.Max, name="throughput.s"))
            seconds[name].append(slowest)
    if hvd.rank() != 0:
        return
    base = np.median(seconds[CONFIGS[0][0]])
    rows = []
    for name, _ in CONFIGS:
        median = np.median(seconds[name])
        samples = args.batches * args.batch_size * hvd.size() / median
        rows.append([name, "%.1f" % (1000 * median / args.batches), "%.0f" % samples,
                     "%.2f" % (median / base)])
    params = model.count_params()
    bench_util.print_table(
        "Keras fit with elastic commits, %d ranks, %.1fM weights + Adam, batch %d per rank "
        "(median of %d rounds, slowest rank)" % (hvd.size(), params / 1e6, args.batch_size,
                                                args.rounds),
        ["configuration", "ms per batch", "samples/s", "time vs no elastic"], rows)


if __name__ == "__main__":
    main()
