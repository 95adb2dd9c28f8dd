"""(b) One training step's worth of gradients: 160 float32 tensors with sizes
log-uniform between 64 and 262144 elements (about 25 MB, fixed seed),
all-reduced inside one tf.function, against 160 separate mpi4py Allreduce
calls and against one mpi4py call on the concatenated buffer.

    tfringrun -np 2 python benchmarks/gradient_step.py
"""
import argparse

import numpy as np
import tensorflow as tf
from mpi4py import MPI

import tf_ring as hvd
from bench_util import memory_bandwidth_gbs, ms, print_table, timed


def gradient_sizes(count=160, seed=1234):
    rng = np.random.default_rng(seed)
    return np.exp(rng.uniform(np.log(64), np.log(262144), size=count)).astype(np.int64)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    hvd.init()
    comm = MPI.COMM_WORLD
    sizes = gradient_sizes()
    rng = np.random.default_rng(hvd.rank())
    arrays = [rng.random(n, dtype=np.float32) for n in sizes]
    outs = [np.empty_like(a) for a in arrays]
    flat = np.concatenate(arrays)
    flat_out = np.empty_like(flat)
    tensors = [tf.constant(a) for a in arrays]

    @tf.function
    def step(ts):
        return [hvd.allreduce(t, op=hvd.Sum) for t in ts]

    def run_step():
        results = step(tensors)
        results[-1].numpy()

    def run_separate():
        for a, o in zip(arrays, outs):
            comm.Allreduce(a, o, op=MPI.SUM)

    def run_concatenated():
        comm.Allreduce(flat, flat_out, op=MPI.SUM)

    # Correctness first: the fused tf_ring result equals mpi4py's.
    results = step(tensors)
    run_separate()
    for r, o in zip(results, outs):
        np.testing.assert_allclose(r.numpy(), o, rtol=1e-6)

    bandwidth_before = memory_bandwidth_gbs()
    before = hvd.stats()
    t_ring, _ = timed(run_step, args.repeats)
    after = hvd.stats()
    t_sep, _ = timed(run_separate, args.repeats)
    t_cat, _ = timed(run_concatenated, args.repeats)
    bandwidth_after = memory_bandwidth_gbs()
    total_mb = flat.nbytes / 2**20
    rows = [
        ["tf_ring, one tf.function", ms(t_ring), "%.2f" % (t_ring / t_sep)],
        ["mpi4py, 160 Allreduce calls", ms(t_sep), "1.00"],
        ["mpi4py, one call on the concatenation", ms(t_cat), "%.2f" % (t_cat / t_sep)],
    ]
    print_table("160 gradients, %.1f MB float32, %d ranks (median ms; ratio = time / 160 mpi4py calls)"
                % (total_mb, hvd.size()), ["method", "ms", "ratio"], rows)
    if hvd.rank() == 0:
        steps = args.repeats + 3
        print("concurrent memcpy per rank before/after: %.0f/%.0f GB/s (see allreduce_sweep.py)"
              % (bandwidth_before, bandwidth_after))
        print("engine per step: %.1f cycles, %.1f negotiations, %.1f fused batches, %.0f cache hits"
              % tuple((after[k] - before[k]) / steps
                      for k in ("cycles", "negotiations", "fused_batches", "cache_hits")))


if __name__ == "__main__":
    main()
