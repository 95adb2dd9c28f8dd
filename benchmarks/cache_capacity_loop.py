"""Keras 3 model.fit with steps_per_execution: the response cache against a
loop's names (issue 49).

A model of 11 Dense layers has 22 gradients; steps_per_execution=48 runs 48
steps in one graph loop, whose iterations are names of their own: 1,056
names per call, more than the cache's default 1,024. A second row group runs
only the collectives: a tf.function whose loop of 48 iterations
grouped-allreduces the same 22 tensors (ms per iteration). With the size fixed at
1,024 (TF_RING_CACHE_CAPACITY set, as before issue 49) every name is evicted
just before it comes back, so every collective negotiates through rank 0;
left unset, the cache grows to fit. The table gives ms per training step,
the cache hits and misses of the timed calls, and raw mpi4py allreducing
the same 22 gradient buffers 48 times (the collectives alone, no model).

    tfringrun -np 2 python benchmarks/cache_capacity_loop.py
"""
import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

WIDTH, LAYERS, STEPS_PER_EXECUTION, BATCH = 32, 11, 48, 8


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=6, help="timed fit calls of 48 steps each")
    parser.add_argument("--rounds", type=int, default=2,
                        help="each mode runs this many times, alternating (the machine drifts)")
    return parser.parse_args()


def build(keras, hvd):
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((WIDTH,))] +
                             [keras.layers.Dense(WIDTH) for _ in range(LAYERS)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.001)), loss="mse",
                  steps_per_execution=STEPS_PER_EXECUTION)
    return model


def run_mode(capacity, args):
    """ms per step and the timed calls' cache hits and misses, with the
    cache's size fixed (capacity) or left to grow (None)."""
    import keras
    import tf_ring
    import tf_ring.keras as hvd
    if capacity is None:
        os.environ.pop("TF_RING_CACHE_CAPACITY", None)
    else:
        os.environ["TF_RING_CACHE_CAPACITY"] = str(capacity)
    hvd.init()
    model = build(keras, hvd)
    rng = np.random.default_rng(hvd.rank())
    rows = BATCH * STEPS_PER_EXECUTION
    x = rng.normal(size=(rows, WIDTH)).astype(np.float32)
    y = rng.normal(size=(rows, WIDTH)).astype(np.float32)
    fit = lambda calls: model.fit(x, y, batch_size=BATCH, epochs=calls, verbose=0, shuffle=False)  # noqa: E731
    fit(3)  # traced, and (left unset) grown to fit
    before = tf_ring.stats()
    MPI.COMM_WORLD.Barrier()
    start = time.perf_counter()
    fit(args.calls)
    seconds = MPI.COMM_WORLD.allreduce(time.perf_counter() - start, op=MPI.MAX)
    after = tf_ring.stats()
    hvd.shutdown()
    steps = args.calls * STEPS_PER_EXECUTION
    return (1000 * seconds / steps, after["cache_hits"] - before["cache_hits"],
            after["cache_misses"] - before["cache_misses"])


def run_bare_loop(capacity, args):
    """ms per iteration of a tf.function loop of 48 grouped allreduces of
    the 22 gradient shapes, and the timed calls' cache hits and misses."""
    import tensorflow as tf
    import tf_ring as hvd
    if capacity is None:
        os.environ.pop("TF_RING_CACHE_CAPACITY", None)
    else:
        os.environ["TF_RING_CACHE_CAPACITY"] = str(capacity)
    hvd.init()
    tensors = [tf.ones(s) for s in [(WIDTH, WIDTH), (WIDTH,)] * LAYERS]

    @tf.function
    def loop(ts):
        for _ in tf.range(STEPS_PER_EXECUTION):
            ts = [t * 0.5 for t in hvd.grouped_allreduce(ts, op=hvd.Sum, name="bare")]
        return ts

    for _ in range(3):
        loop(tensors)
    before = hvd.stats()
    MPI.COMM_WORLD.Barrier()
    start = time.perf_counter()
    for _ in range(args.calls):
        loop(tensors)
    seconds = MPI.COMM_WORLD.allreduce(time.perf_counter() - start, op=MPI.MAX)
    after = hvd.stats()
    hvd.shutdown()
    return (1000 * seconds / (args.calls * STEPS_PER_EXECUTION),
            after["cache_hits"] - before["cache_hits"],
            after["cache_misses"] - before["cache_misses"])


def mpi4py_ms_per_step(args):
    comm = MPI.COMM_WORLD
    shapes = [(WIDTH, WIDTH), (WIDTH,)] * LAYERS
    buffers = [np.ones(s, np.float32) for s in shapes]
    outs = [np.empty_like(b) for b in buffers]
    steps = args.calls * STEPS_PER_EXECUTION
    comm.Barrier()
    start = time.perf_counter()
    for _ in range(steps):
        for b, o in zip(buffers, outs):
            comm.Allreduce(b, o)
    return 1000 * comm.allreduce(time.perf_counter() - start, op=MPI.MAX) / steps


def main():
    args = parse_args()
    results = {"fit: fixed at 1024 (before)": [], "fit: unset, grows (after)": [],
               "bare loop: fixed at 1024 (before)": [], "bare loop: unset, grows (after)": []}
    for _ in range(args.rounds):
        results["fit: fixed at 1024 (before)"].append(run_mode(1024, args))
        results["fit: unset, grows (after)"].append(run_mode(None, args))
        results["bare loop: fixed at 1024 (before)"].append(run_bare_loop(1024, args))
        results["bare loop: unset, grows (after)"].append(run_bare_loop(None, args))
    raw = mpi4py_ms_per_step(args)
    if MPI.COMM_WORLD.rank == 0:
        print("load average: %s" % open("/proc/loadavg").read().strip())
        print("| cache | ms per step or iteration (median of %d) | hits | misses | x mpi4py's collectives |"
              % args.rounds)
        print("|---|---|---|---|---|")
        for mode, runs in results.items():
            ms = float(np.median([r[0] for r in runs]))
            print("| %s | %.2f | %d | %d | %.1fx |" % (mode, ms, runs[-1][1], runs[-1][2], ms / raw))
        print("| mpi4py: 22 allreduces x 48 | %.2f | | | 1.0x |" % raw)


if __name__ == "__main__":
    main()
