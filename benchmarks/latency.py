"""(c) Latency of a lone 4 KB eager allreduce, against mpi4py on the same buffer.

    tfringrun -np 2 python benchmarks/latency.py

The goal (issue 22) is tf_ring at most 2x a TF eager op (tf.identity) on the
same tensor. benchmarks/latency_stages.py splits the op into its stages.
"""
import argparse

import numpy as np
import tensorflow as tf
from mpi4py import MPI

import tf_ring as hvd
from bench_util import core_label, core_latency_ns, print_table, timed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=500)
    parser.add_argument("--idle-set", action="store_true",
                        help="register a process set of every rank that stays unused, to "
                             "show what an idle set costs the global set's ops")
    args = parser.parse_args()
    hvd.init(process_sets=[hvd.ProcessSet(list(range(MPI.COMM_WORLD.Get_size())))]
             if args.idle_set else None)
    comm = MPI.COMM_WORLD
    data = np.ones(1024, np.float32)
    out = np.empty_like(data)
    tensor = tf.constant(data)

    cores_before = core_latency_ns()
    t_mpi, min_mpi = timed(lambda: comm.Allreduce(data, out, op=MPI.SUM), args.repeats, warmup=20)
    t_ring, min_ring = timed(lambda: hvd.allreduce(tensor, op=hvd.Sum), args.repeats, warmup=20)
    t_identity, _ = timed(lambda: tf.identity(tensor), args.repeats, warmup=20)
    cores_after = core_latency_ns()
    us = lambda s: "%.1f" % (s * 1e6)
    ratio = lambda t: "%.2fx" % (t / t_identity)
    print_table("Lone 4 KB eager allreduce, %d ranks%s (microseconds)"
                % (hvd.size(), ", one idle process set" if args.idle_set else ""),
                ["method", "median us", "min us", "median / tf.identity"],
                [["mpi4py Allreduce", us(t_mpi), us(min_mpi), ratio(t_mpi)],
                 ["tf_ring eager allreduce", us(t_ring), us(min_ring),
                  ratio(t_ring) + " (goal <= 2x)"],
                 ["(TF eager tf.identity, for scale)", us(t_identity), "", "1.00x"]])
    if hvd.rank() == 0:
        print("cores before/after (see allreduce_sweep.py): %s" % core_label(cores_before, cores_after))


if __name__ == "__main__":
    main()
