"""The ranks' side of compression.py: one Keras 3 fit with one compression
choice, timed batch by batch, evaluated after every epoch; rank 0 prints a
RESULT line of JSON. compression.py runs it under tfringrun, once per
choice (each in a fresh job: peak memory and timings start alike), and
passes it the arguments it does not know itself."""
import argparse
import json
import os
import sys
import statistics
import time

import numpy as np

CHOICES = ["none", "fp16", "bf16", "powersgd"]
PER_RANK_BATCH = 32
WIDTH, DEPTH = 2048, 3  # 64 -> 2048 -> 2048 -> 2048 -> 10: 8,546,314 parameters
LR = 0.05


def load_digits_split(ranks):
    """(this rank's training rows, labels), (held-out rows, labels): the same
    shuffled order on every rank, the training set cut to whole global batches."""
    from sklearn.datasets import load_digits
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(x))
    x, y = x[order], y[order]
    split = int(0.8 * len(x))
    usable = split - split % (PER_RANK_BATCH * ranks)
    return (x[:usable], y[:usable]), (x[split:], y[split:])


def shard(array, rank, ranks):
    """Rank `rank`'s PER_RANK_BATCH rows of every global batch."""
    per_batch = array.reshape((-1, ranks, PER_RANK_BATCH) + array.shape[1:])
    return per_batch[:, rank].reshape((-1,) + array.shape[1:])


def status_kb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def reset_peak_rss():
    """Linux resets VmHWM (peak resident memory) to the current RSS on '5'."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def make_compression(hvd, name, args):
    if name == "powersgd":
        return hvd.Compression.powersgd(rank=args.rank, start_powerSGD_iter=args.warmup_steps)
    return getattr(hvd.Compression, name)


def powersgd_state_bytes(optimizer):
    powersgd = optimizer._tf_ring_settings.powersgd
    return 0 if powersgd is None else powersgd.state.memory_bytes()


def train(keras, hvd, name, args, data, epochs):
    (x, y), (x_test, y_test) = data
    keras.utils.set_random_seed(1)  # the same weights on every rank, for every choice
    model = keras.Sequential([keras.Input((64,))]
                             + [keras.layers.Dense(WIDTH, activation="relu") for _ in range(DEPTH)]
                             + [keras.layers.Dense(10)])
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(LR, momentum=0.9),
                                         compression=make_compression(hvd, name, args))
    model.compile(optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    record = {"batches": [], "epoch_train": [], "accuracy": []}

    class Clock(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch_start = time.perf_counter()
            record["batches"].append([])

        def on_train_batch_begin(self, batch, logs=None):
            self.batch_start = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            record["batches"][-1].append(time.perf_counter() - self.batch_start)

        def on_epoch_end(self, epoch, logs=None):
            record["epoch_train"].append(time.perf_counter() - self.epoch_start)
            logits = model.predict_on_batch(x_test)
            record["accuracy"].append(float(np.mean(np.argmax(logits, 1) == y_test)))

    reset_peak_rss()
    model.fit(shard(x, hvd.rank(), hvd.size()), shard(y, hvd.rank(), hvd.size()),
              batch_size=PER_RANK_BATCH, epochs=epochs, shuffle=True, verbose=0,
              callbacks=[Clock()])
    record["peak_rss_mb"] = status_kb("VmHWM") * 1024 / 1e6
    record["state_mb"] = powersgd_state_bytes(optimizer) / 1e6
    record["gradient_mb"] = sum(int(np.prod(w.shape)) for w in model.trainable_weights) * 4 / 1e6
    # Every rank must end with the same weights, bit for bit.
    weights = [w.astype(np.float64) for w in model.get_weights()]
    sums = np.array([[np.sum(w), np.sum(w * w)] for w in weights]).ravel()
    gathered = hvd.allgather(sums[None], name="bench.weights." + name).numpy()
    assert (gathered == gathered[0]).all(), "ranks ended with different weights (%s)" % name
    return record


def summarize(record, target):
    """(median step seconds after the first epoch, (epochs, seconds) to the
    target accuracy or None)."""
    steady = [t for epoch in record["batches"][1:] for t in epoch]
    reached, elapsed = None, 0.0
    for epoch, (seconds, acc) in enumerate(zip(record["epoch_train"], record["accuracy"])):
        elapsed += seconds
        if acc >= target:
            reached = (epoch + 1, elapsed)
            break
    return statistics.median(steady), reached


def mpi4py_allreduce_seconds(megabytes, repeats=5):
    """One raw Allreduce of none's bytes: the wire's share of none's step."""
    from mpi4py import MPI

    from bench_util import timed
    buf = np.ones(int(megabytes * 1e6 / 4), np.float32)
    out = np.empty_like(buf)
    return timed(lambda: MPI.COMM_WORLD.Allreduce(buf, out), repeats, warmup=1)[0]


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def work(args):
    """Trains with one choice; rank 0 prints its figures as one RESULT line."""
    import keras

    import tf_ring.keras as hvd

    hvd.init()
    load_before = loadavg()
    record = train(keras, hvd, args.choice, args, load_digits_split(hvd.size()), args.epochs)
    step, reached = summarize(record, args.target)
    result = dict(choice=args.choice, step_s=step, reached=reached,
                  final_accuracy=record["accuracy"][-1], peak_rss_mb=record["peak_rss_mb"],
                  state_mb=record["state_mb"], gradient_mb=record["gradient_mb"],
                  load_before=load_before, load_after=loadavg())
    if args.choice == "none":  # the same bytes by raw MPI, nothing else
        result["mpi4py_allreduce_s"] = mpi4py_allreduce_seconds(record["gradient_mb"])
    if hvd.rank() == 0:
        print("RESULT " + json.dumps(result), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--target", type=float, default=0.97, help="held-out accuracy to reach")
    parser.add_argument("--rank", type=int, default=4, help="PowerSGD's rank")
    parser.add_argument("--warmup-steps", type=int, default=22,
                        help="PowerSGD's start_powerSGD_iter (22 steps: one epoch)")
    parser.add_argument("--choice", choices=CHOICES, default="none")
    work(parser.parse_args())


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # bench_util
    main()
