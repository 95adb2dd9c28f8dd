"""(a) Allreduce sweep, 4 KB to 64 MB float32: tf_ring eager and in
tf.function against mpi4py Allreduce on the same NumPy buffers, one run.

    tfringrun -np 2 python benchmarks/allreduce_sweep.py
"""
import argparse

import numpy as np
import tensorflow as tf
from mpi4py import MPI

import tf_ring as hvd
from bench_util import memory_bandwidth_gbs, ms, print_table, timed


def landed(result):
    """The result as NumPy without a copy, as mpi4py's output already is:
    .numpy() copies (about 6 ms at 64 MB here, which until 2026-11-26 this
    sweep charged to tf_ring); the private _numpy() shares the buffer."""
    return result._numpy()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-mb", type=float, default=64)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    hvd.init()
    comm = MPI.COMM_WORLD
    rows = []
    size_bytes = 4096
    while size_bytes <= args.max_mb * (1 << 20):
        n = size_bytes // 4
        data = np.random.default_rng(hvd.rank()).random(n, dtype=np.float32)
        out = np.empty_like(data)
        tensor = tf.constant(data)
        reps = args.repeats if size_bytes < (8 << 20) else max(5, args.repeats // 3)

        def run_mpi():
            comm.Allreduce(data, out, op=MPI.SUM)

        def run_eager():
            landed(hvd.allreduce(tensor, op=hvd.Sum, name="sweep"))

        fn = tf.function(lambda x: hvd.allreduce(x, op=hvd.Sum, name="sweep_fn"))

        def run_function():
            landed(fn(tensor))

        bandwidth_before = memory_bandwidth_gbs()
        t_mpi, _ = timed(run_mpi, reps)
        t_eager, _ = timed(run_eager, reps)
        t_fn, _ = timed(run_function, reps)
        bandwidth_after = memory_bandwidth_gbs()
        rows.append([_human(size_bytes), ms(t_mpi), ms(t_eager), ms(t_fn),
                     "%.2fx" % (t_mpi / t_eager), "%.2fx" % (t_mpi / t_fn),
                     "%.2f" % (size_bytes / t_eager / 1e9),
                     "%.0f/%.0f" % (bandwidth_before, bandwidth_after)])
        size_bytes *= 4
    print_table("Allreduce sweep, float32, %d ranks (median ms; speedup = mpi4py time / tf_ring time)"
                % hvd.size(),
                ["size", "mpi4py", "tf_ring eager", "tf_ring tf.function", "speedup eager",
                 "speedup fn", "eager GB/s", "memcpy GB/s"], rows)
    if hvd.rank() == 0:
        print("memcpy GB/s: what each rank copied per second while all copied at once, before/after "
              "the row. On the 2-core EPYC VM, about 10 means the ranks' cores share an L3 and about "
              "20 that they sit on two chiplets, where large allreduces run about 1.6x slower "
              "(benchmarks/README.md, 'The 64 MB slow mode').")


def _human(b):
    return "%d KB" % (b >> 10) if b < (1 << 20) else "%d MB" % (b >> 20)


if __name__ == "__main__":
    main()
