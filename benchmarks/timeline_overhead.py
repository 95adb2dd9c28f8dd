"""What writing the timeline costs: benchmark (b)'s 160-gradient step, timed
in alternating blocks with the timeline off and on (rank 0 writes it), next
to 160 raw mpi4py Allreduce calls on the same buffers.

    tfringrun -np 2 python benchmarks/timeline_overhead.py
"""
import argparse
import os
import statistics
import tempfile

import numpy as np
import tensorflow as tf
from mpi4py import MPI

import tf_ring as hvd
from bench_util import ms, print_table, timed
from gradient_step import gradient_sizes


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=20, help="steps per block")
    parser.add_argument("--blocks", type=int, default=5, help="off/on block pairs")
    args = parser.parse_args()
    hvd.init()
    comm = MPI.COMM_WORLD
    rng = np.random.default_rng(hvd.rank())
    arrays = [rng.random(n, dtype=np.float32) for n in gradient_sizes()]
    outs = [np.empty_like(a) for a in arrays]
    tensors = [tf.constant(a) for a in arrays]

    @tf.function
    def step(ts):
        return [hvd.allreduce(t, op=hvd.Sum) for t in ts]

    def run_step():
        step(tensors)[-1].numpy()

    def run_mpi4py():
        for a, o in zip(arrays, outs):
            comm.Allreduce(a, o, op=MPI.SUM)

    folder = comm.bcast(tempfile.mkdtemp() if hvd.rank() == 0 else None)
    path = os.path.join(folder, "overhead.json")
    off, on, raw = [], [], []
    for _ in range(args.blocks):
        off.append(timed(run_step, args.repeats)[0])
        hvd.start_timeline(path)
        on.append(timed(run_step, args.repeats)[0])
        hvd.stop_timeline()
        raw.append(timed(run_mpi4py, args.repeats)[0])
    t_off, t_on, t_raw = (statistics.median(v) for v in (off, on, raw))
    size_mb = os.path.getsize(path) / 2**20 if hvd.rank() == 0 else 0
    rows = [["tf_ring, timeline off", ms(t_off), "%.2f" % (t_off / t_raw), "1.000"],
            ["tf_ring, timeline on", ms(t_on), "%.2f" % (t_on / t_raw), "%.3f" % (t_on / t_off)],
            ["mpi4py, 160 Allreduce calls", ms(t_raw), "1.00", ""]]
    print_table("Timeline cost, 160 gradients, %d ranks (median of %d blocks of %d steps; last "
                "block's file %.1f MB)" % (hvd.size(), args.blocks, args.repeats, size_mb),
                ["method", "ms", "vs mpi4py", "vs timeline off"], rows)


if __name__ == "__main__":
    main()
