"""A process set that holds every rank against the global set: a 64 MB
allreduce and benchmark (b)'s 160-gradient step, each run on the global set,
on a set of all ranks, and with mpi4py on the same buffers, in one run.

    tfringrun -np 2 python benchmarks/process_set_paths.py

Goal (issue 22): the set within 1.15x of the global set for both.
"""
import argparse

import numpy as np
import tensorflow as tf
from mpi4py import MPI

import tf_ring as hvd
from bench_util import ms, print_table, timed
from gradient_step import gradient_sizes

GOAL = 1.15


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    hvd.init(process_sets=[hvd.ProcessSet(list(range(MPI.COMM_WORLD.Get_size())))])
    everyone = hvd.process_sets()[-1]
    comm = MPI.COMM_WORLD
    rng = np.random.default_rng(hvd.rank())
    big = rng.random(16 * 2**20, dtype=np.float32)
    big_out = np.empty_like(big)
    big_tensor = tf.constant(big)
    grads = [rng.random(n, dtype=np.float32) for n in gradient_sizes()]
    grad_outs = [np.empty_like(g) for g in grads]
    grad_tensors = [tf.constant(g) for g in grads]

    def make_step(process_set):
        @tf.function
        def step(ts):
            return [hvd.allreduce(t, op=hvd.Sum, process_set=process_set) for t in ts]
        return step

    steps = {"global set": make_step(hvd.global_process_set), "set of every rank": make_step(everyone)}

    def big_on(process_set):
        return lambda: hvd.allreduce(big_tensor, op=hvd.Sum, process_set=process_set,
                                     name="ps_big").numpy()

    def step_on(name):
        return lambda: steps[name](grad_tensors)[-1].numpy()

    # Correctness first: both sets agree with mpi4py.
    comm.Allreduce(big, big_out, op=MPI.SUM)
    for process_set in (hvd.global_process_set, everyone):
        np.testing.assert_allclose(big_on(process_set)(), big_out, rtol=1e-6)
    for g, o in zip(grads, grad_outs):
        comm.Allreduce(g, o, op=MPI.SUM)
    for name in steps:
        for got, want in zip(steps[name](grad_tensors), grad_outs):
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)

    reps = args.repeats
    t_big = {"global set": timed(big_on(hvd.global_process_set), reps)[0],
             "set of every rank": timed(big_on(everyone), reps)[0],
             "mpi4py": timed(lambda: comm.Allreduce(big, big_out, op=MPI.SUM), reps)[0]}
    t_step = {name: timed(step_on(name), reps)[0] for name in steps}
    t_step["mpi4py"] = timed(lambda: [comm.Allreduce(g, o, op=MPI.SUM)
                                      for g, o in zip(grads, grad_outs)], reps)[0]
    rows = []
    for work, times in (("64 MB allreduce", t_big), ("160-gradient step", t_step)):
        for who, t in times.items():
            ratio = t / times["global set"]
            verdict = ("goal %.2fx: %s" % (GOAL, "met" if ratio <= GOAL else "missed")
                       if who == "set of every rank" else "")
            rows.append([work, who, ms(t), "%.2fx" % ratio, verdict])
    print_table("Process set of every rank vs the global set, %d ranks (median ms; ratio = time / "
                "global set's)" % hvd.size(), ["work", "run on", "ms", "ratio", ""], rows)


if __name__ == "__main__":
    main()
