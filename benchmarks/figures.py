"""The engine's three speed figures in one short run, each against its
baseline on the same buffers, interleaved so the machine's drift lands on
both sides alike (run by benchmarks/under_load.py, quiet and under load):

- one 64 MB eager allreduce against mpi4py's `Allreduce`;
- 160 gradients (21.6 MB, benchmarks/gradient_step.py's sizes) as one
  grouped allreduce in a `tf.function`, against 160 mpi4py calls: the
  gradients read inside the function, as a training step has them
  ("step"), and passed in as 160 arguments ("step_args", which adds
  TensorFlow's binding of each argument);
- a lone 4 KB eager allreduce against a TensorFlow eager `tf.identity`;
- with --only hosts, on simulated hosts: one 64 MB eager allreduce (the
  hierarchical path) against the link floor, the time one host's link
  takes to carry 64 MB (--link-bits-per-s), with a measured 64 MB
  Send/Recv between the hosts printed beside it.

Rank 0 prints one line `FIGURES {json}`: per figure the two medians in
seconds, the ranges of the blocks' medians, and the engine's counters.

    tfringrun -np 2 python benchmarks/figures.py [--blocks 5]
"""
import argparse
import json
import statistics
import time

import numpy as np
import tensorflow as tf
from mpi4py import MPI

import tf_ring as hvd
from bench_util import core_latency_ns
from gradient_step import gradient_sizes


def _block_times(named_fns, blocks, per_block, comm):
    """{name: [seconds per run in each block]}: every block visits every fn
    in turn, all ranks starting it together, and runs it `per_block` times
    back to back, as a training loop does; a block's time is the slowest
    rank's. One barrier a block, not one a run: mpi4py's barrier spins in
    Open MPI's progress loop, and under load a spinning barrier on one rank
    holds the core its peer needs to finish the run being timed."""
    out = {name: [] for name, _ in named_fns}
    for _ in range(blocks):
        for name, fn in named_fns:
            comm.Barrier()
            start = time.perf_counter()
            for _ in range(per_block):
                fn()
            elapsed = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
            out[name].append(elapsed / per_block)
    return out


def _figure(times, ours, theirs):
    both = list(zip(times[ours], times[theirs]))
    return {"ours": statistics.median(times[ours]), "theirs": statistics.median(times[theirs]),
            "ours_blocks": times[ours], "theirs_blocks": times[theirs],
            "block_ratios": [a / b for a, b in both]}


def _across_hosts(comm, rng, args):
    """64 MB across hosts against the link floor: in an allreduce each host
    sends 64 MB and receives 64 MB (its ranks' slices), so no algorithm
    beats one link carrying 64 MB one way."""
    big = rng.random(16 << 20, dtype=np.float32)
    big_tensor = tf.constant(big)
    expected = comm.allreduce(float(big[:1024].astype(np.float64).sum()))
    got = hvd.allreduce(big_tensor, op=hvd.Sum, name="figures_hosts")._numpy()
    assert abs(float(got[:1024].astype(np.float64).sum()) - expected) < 1e-2 * abs(expected)
    before = hvd.stats()["hierarchical_batches"]
    times = _block_times([("ring", lambda: hvd.allreduce(big_tensor, op=hvd.Sum, name="figures_hosts")._numpy())],
                         args.blocks, 2, comm)
    crossed = hvd.stats()["hierarchical_batches"] - before
    # A measured one-way 64 MB between the hosts' first ranks, for scale.
    peer = hvd.local_size()  # the first rank of the second host (by-node mapping)
    sent = np.empty(0, np.uint8)
    comm.Barrier()
    start = time.perf_counter()
    if comm.rank == 0:
        comm.Send(big, dest=peer, tag=51)
        comm.Recv(sent, source=peer, tag=52)
    elif comm.rank == peer:
        comm.Recv(big, source=0, tag=51)
        comm.Send(sent, dest=0, tag=52)
    one_way = comm.bcast(time.perf_counter() - start, root=0)
    floor = big.nbytes * 8 / args.link_bits_per_s
    return {"ours": statistics.median(times["ring"]), "theirs": floor, "ours_blocks": times["ring"],
            "theirs_blocks": [floor] * len(times["ring"]),
            "block_ratios": [t / floor for t in times["ring"]], "send_one_way": one_way,
            "hierarchical_batches": crossed, "hosts": hvd.cross_size(), "local_size": hvd.local_size()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--only", default="64mb,step,4kb")
    parser.add_argument("--link-bits-per-s", type=float, default=2e9,
                        help="--only hosts: each host's link rate, for the floor")
    args = parser.parse_args()
    which = set(args.only.split(","))
    hvd.init()
    comm = MPI.COMM_WORLD
    rng = np.random.default_rng(hvd.rank())
    result = {"ranks": hvd.size(), "cores_ns_before": core_latency_ns()}

    if "64mb" in which:
        big = rng.random(16 << 20, dtype=np.float32)
        big_out = np.empty_like(big)
        big_tensor = tf.constant(big)
        expected = comm.allreduce(float(big[:1024].astype(np.float64).sum()))
        got = hvd.allreduce(big_tensor, op=hvd.Sum, name="figures_64mb")._numpy()
        assert abs(float(got[:1024].astype(np.float64).sum()) - expected) < 1e-2 * abs(expected)
        hvd.reset_stats()
        times = _block_times(
            [("ring", lambda: hvd.allreduce(big_tensor, op=hvd.Sum, name="figures_64mb")._numpy()),
             ("mpi", lambda: comm.Allreduce(big, big_out, op=MPI.SUM))], args.blocks, 4, comm)
        result["64mb"] = dict(_figure(times, "ring", "mpi"), stats=hvd.stats())
        del big, big_out, big_tensor

    if "step" in which:
        arrays = [rng.random(int(n), dtype=np.float32) for n in gradient_sizes()]
        outs = [np.empty_like(a) for a in arrays]
        # As in a training step, the gradients live inside the tf.function
        # (read from variables: the same buffers, which the op can no more
        # reuse in place than the arrays mpi4py gets). Passed in as 160
        # arguments instead, TensorFlow's binding of each argument adds
        # about 1.5 ms a call that no training step pays ("step_args").
        params = [tf.Variable(a) for a in arrays]
        tensors = [tf.constant(a) for a in arrays]
        in_graph = tf.function(lambda: hvd.grouped_allreduce([v.read_value() for v in params], op=hvd.Sum,
                                                             name="figures_step"))
        as_args = tf.function(lambda ts: hvd.grouped_allreduce(ts, op=hvd.Sum, name="figures_step_args"))
        for got in (in_graph(), as_args(tensors)):  # correct before timed
            for r, a, o in zip(got, arrays, outs):
                comm.Allreduce(a, o, op=MPI.SUM)
                np.testing.assert_allclose(r.numpy(), o, rtol=1e-5)
        hvd.reset_stats()

        def separate():
            for a, o in zip(arrays, outs):
                comm.Allreduce(a, o, op=MPI.SUM)

        times = _block_times([("ring", lambda: in_graph()[-1]._numpy()), ("mpi", separate),
                              ("ring_args", lambda: as_args(tensors)[-1]._numpy())], args.blocks, 6, comm)
        result["step"] = dict(_figure(times, "ring", "mpi"), stats=hvd.stats())
        result["step_args"] = _figure(times, "ring_args", "mpi")

    if "4kb" in which:
        small = tf.constant(np.ones(1024, np.float32))
        for _ in range(50):
            hvd.allreduce(small, op=hvd.Sum)
            tf.identity(small)
        times = _block_times([("ring", lambda: hvd.allreduce(small, op=hvd.Sum)),
                                ("identity", lambda: tf.identity(small))], args.blocks, 200, comm)
        result["4kb"] = _figure(times, "ring", "identity")

    if "hosts" in which:
        result["hosts"] = _across_hosts(comm, rng, args)

    result["cores_ns_after"] = core_latency_ns()
    if hvd.rank() == 0:
        print("FIGURES " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
