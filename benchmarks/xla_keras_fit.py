"""Keras fit() step time with jit_compile True and False, with and without
tf_ring.keras.DistributedOptimizer (issue 21's Keras numbers).

    tfringrun -np 2 python benchmarks/xla_keras_fit.py [--tf-keras]

Rows: the model trained by this process alone (plain optimizer, no
collectives), then with DistributedOptimizer (the gradients' grouped
allreduce inside the compiled step when jit_compile is True). Configurations
alternate for --rounds rounds (medians over rounds). A step's time is the
median gap between consecutive on_train_batch_end calls (the slowest
rank's), after the first --warmup batches; "first batch s" includes tracing
and compiling. "kept" is the time XLA saves with tf_ring divided by the time
it saves alone. Synthetic data; an MLP of --width units.
"""
import argparse
import os
import statistics
import sys
import time


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3, help="runs of each configuration (median)")
    p.add_argument("--tf-keras", action="store_true", help="tf_keras instead of Keras 3")
    return p.parse_args()


ARGS = parse()
if ARGS.tf_keras:
    os.environ["TF_USE_LEGACY_KERAS"] = "1"  # before tf.keras is first touched

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

from bench_util import print_table  # noqa: E402 (sets TF_CPP_MIN_LOG_LEVEL)
import tf_ring  # noqa: E402
import tf_ring.keras as hvd  # noqa: E402
from tf_ring.keras import _flavor  # noqa: E402

k = _flavor.keras_module()


def step_times(callback_times, warmup):
    gaps = np.diff(callback_times)[warmup:]
    # The slowest rank defines a collective step's time.
    gaps = MPI.COMM_WORLD.allreduce(list(gaps), op=_elementwise_max)
    return statistics.median(gaps)


def _elementwise_max_fn(a, b, _datatype=None):
    return [max(x, y) for x, y in zip(a, b)]


_elementwise_max = MPI.Op.Create(_elementwise_max_fn, commute=True)


class BatchClock(k.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.start, self.ends = None, []

    def on_train_begin(self, logs=None):
        self.start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.ends.append(time.perf_counter())


def run(jit, distributed, x, y):
    layers = [k.Input((x.shape[1],))]
    layers += [k.layers.Dense(ARGS.width, activation="relu") for _ in range(ARGS.layers)]
    model = k.Sequential(layers + [k.layers.Dense(10)])
    optimizer = k.optimizers.SGD(0.01)
    if distributed:
        optimizer = hvd.DistributedOptimizer(optimizer)
    model.compile(optimizer, loss=k.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=jit)
    clock = BatchClock()
    callbacks = [clock] + ([hvd.callbacks.BroadcastGlobalVariablesCallback(0)] if distributed else [])
    MPI.COMM_WORLD.Barrier()
    before = tf_ring.stats()["fused_batches"]
    model.fit(x, y, batch_size=ARGS.batch, epochs=1, shuffle=False, verbose=0, callbacks=callbacks)
    batches = (tf_ring.stats()["fused_batches"] - before) / ARGS.steps
    assert bool(model.jit_compile) is jit, "XLA was turned off"
    return step_times(clock.ends, ARGS.warmup), clock.ends[0] - clock.start, batches


def main():
    hvd.init()
    data = np.random.default_rng(1 + hvd.rank())
    n = ARGS.batch * ARGS.steps
    x = data.standard_normal((n, 256)).astype(np.float32)
    y = data.integers(0, 10, n).astype(np.int32)
    configs = [(d, j) for d in (False, True) for j in (False, True)]
    results = {c: [] for c in configs}
    for _ in range(ARGS.rounds):  # configurations alternate, so load drift hits all alike
        for distributed, jit in configs:
            results[distributed, jit].append(run(jit, distributed, x, y))
    rows, times = [], {}
    for distributed, jit in configs:
        median, first, batches = (statistics.median(r[i] for r in results[distributed, jit])
                                  for i in range(3))
        times[distributed, jit] = median
        label = ("DistributedOptimizer, %d ranks" % hvd.size()) if distributed else \
            "this process alone"
        rows.append([label, str(jit), "%.3f" % (median * 1e3), "%.2f" % first,
                     "%.2f" % batches if distributed else "-"])
    alone = times[False, False] - times[False, True]
    ring = times[True, False] - times[True, True]
    flavour = "tf_keras" if ARGS.tf_keras else "Keras 3"
    print_table("%s fit, MLP 256-%sx%d-10, batch %d per rank, %d steps (median step, %d rounds)"
                % (flavour, ARGS.width, ARGS.layers, ARGS.batch, ARGS.steps, ARGS.rounds),
                ["model", "jit_compile", "ms/step", "first batch s", "fused batches/step"], rows)
    if hvd.rank() == 0:
        kept = "%.2f" % (ring / alone) if alone > 0 else "n/a (XLA saved nothing alone)"
        print("XLA speed-up alone %.2fx, with tf_ring %.2fx; kept %s"
              % (times[False, False] / times[False, True], times[True, False] / times[True, True],
                 kept))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
