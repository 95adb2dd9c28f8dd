"""(a) Allreduce sweep, 4 KB to 64 MB float32: tf_ring eager and in
tf.function against mpi4py Allreduce on the same NumPy buffers, one run.

    tfringrun -np 2 python benchmarks/allreduce_sweep.py
"""
import argparse

import numpy as np
import tensorflow as tf
from mpi4py import MPI

import tf_ring as hvd
from bench_util import core_label, core_latency_ns, ms, print_table, timed


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
    goal = None
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

        cores_before = core_latency_ns()
        t_mpi, _ = timed(run_mpi, reps)
        t_eager, _ = timed(run_eager, reps)
        t_fn, _ = timed(run_function, reps)
        cores_after = core_latency_ns()
        rows.append([_human(size_bytes), ms(t_mpi), ms(t_eager), ms(t_fn),
                     "%.2fx" % (t_mpi / t_eager), "%.2fx" % (t_mpi / t_fn),
                     "%.2f" % (size_bytes / t_eager / 1e9),
                     core_label(cores_before, cores_after)])
        if size_bytes == 64 << 20:
            goal = "goal: 64 MB at least 1.5x mpi4py; eager %.2fx (cores %s): %s" % (
                t_mpi / t_eager, core_label(cores_before, cores_after),
                "met" if t_mpi / t_eager >= 1.5 else "not met")
        size_bytes *= 4
    print_table("Allreduce sweep, float32, %d ranks (median ms; speedup = mpi4py time / tf_ring time)"
                % hvd.size(),
                ["size", "mpi4py", "tf_ring eager", "tf_ring tf.function", "speedup eager",
                 "speedup fn", "eager GB/s", "cores"], rows)
    if hvd.rank() == 0:
        print("cores: the one-way cache-line latency between CPUs 0 and 1 before/after the row "
              "(bench_util.core_latency_ns), and the state it shows: one L3 under 100 ns, two "
              "chiplets over 120 ns (benchmarks/README.md, 'Chunks that do not bounce').")
        if goal:
            print(goal)


def _human(b):
    return "%d KB" % (b >> 10) if b < (1 << 20) else "%d MB" % (b >> 20)


if __name__ == "__main__":
    main()
