"""The ranks' side of compression.py: one Keras 3 fit per compression choice,
timed batch by batch, evaluated after every epoch."""
import gc
import statistics
import time

import numpy as np

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
    state = getattr(optimizer._tf_ring_settings, "powersgd_state", None)
    return 0 if state is None else state.memory_bytes()


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

    rss_before = status_kb("VmRSS")
    reset_peak_rss()
    model.fit(shard(x, hvd.rank(), hvd.size()), shard(y, hvd.rank(), hvd.size()),
              batch_size=PER_RANK_BATCH, epochs=epochs, shuffle=True, verbose=0,
              callbacks=[Clock()])
    record["peak_rss_mb"] = status_kb("VmHWM") / 1024.0
    record["rss_before_mb"] = rss_before / 1024.0
    record["state_mb"] = powersgd_state_bytes(optimizer) / 2.0 ** 20
    record["gradient_mb"] = sum(int(np.prod(w.shape)) for w in model.trainable_weights) * 4 / 1e6
    # Every rank must end with the same weights, bit for bit.
    weights = [w.astype(np.float64) for w in model.get_weights()]
    sums = np.array([[np.sum(w), np.sum(w * w)] for w in weights]).ravel()
    gathered = hvd.allgather(sums[None], name="bench.weights." + name).numpy()
    assert (gathered == gathered[0]).all(), "ranks ended with different weights (%s)" % name
    return record


def summarize(record, target):
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
    import keras

    import tf_ring.keras as hvd
    from bench_util import print_table

    hvd.init()
    load_before = loadavg()
    data = load_digits_split(hvd.size())
    epochs = args.epochs
    records = {}
    for name in args.choices.split(","):
        records[name] = train(keras, hvd, name, args, data, epochs)
        keras.backend.clear_session()
        gc.collect()
    wire = mpi4py_allreduce_seconds(records["none"]["gradient_mb"])
    load_after = loadavg()
    base = summarize(records["none"], args.target)[0]
    rows = []
    for name, record in records.items():
        step, reached = summarize(record, args.target)
        rows.append([name, "%.1f" % (step * 1e3), "%.2fx" % (base / step),
                     "-" if reached is None else str(reached[0]),
                     "-" if reached is None else "%.1f" % reached[1],
                     "%.1f" % (100 * record["accuracy"][-1]),
                     "%.0f" % record["peak_rss_mb"]])
    rows.append(["mpi4py Allreduce of %.1f MB alone" % records["none"]["gradient_mb"],
                 "%.1f" % (wire * 1e3), "", "", "", "", ""])
    name = "powersgd rank %d, warm-up %d steps" % (args.rank, args.warmup_steps)
    print_table("%s; Keras 3 fit, MLP %dx%d on digits, batch %d per rank, %d epochs; target "
                "accuracy %.1f%%; %s; loadavg %s before, %s after (step = median batch time "
                "after epoch 1)" % (args.link, DEPTH, WIDTH, PER_RANK_BATCH, epochs,
                                    100 * args.target, name, load_before, load_after),
                ["compression", "step ms", "speedup", "epochs to target", "s to target",
                 "final acc %", "peak RSS MB"], rows)
    if hvd.rank() == 0 and "powersgd" in records:
        extra = records["powersgd"]["peak_rss_mb"] - records["none"]["peak_rss_mb"]
        print("powersgd state: %.1f MB (Q factors and residuals; %.1f MB of float32 gradients); "
              "peak RSS %+.0f MB against none" % (records["powersgd"]["state_mb"],
                                                  records["none"]["gradient_mb"], extra))
