"""Shared-memory chunk sizes side by side: a 64 MB allreduce and the
160-gradient step (21.6 MB, one fused batch), engine restarted with each
TF_RING_SHM_CHUNK_BYTES in turn and with it unset (the default: 1 MiB
chunks where the probe finds the ranks' cores sharing a cache, single-copy
reads where it finds them apart, 4 MiB staged chunks when it cannot tell,
decided per allreduce), the default without single-copy reads
(TF_RING_SHM_SINGLE_COPY=0, the default before 2026-11-27 late), blocks
interleaved, with mpi4py on the same buffers. Each block is tagged by the core-to-core latency between
CPUs 0 and 1 before and after it (benchmarks/shm_chunk_probe.cc, compiled
on first use): under 100 ns the ranks' cores share an L3, over 120 ns they
sit on two chiplets; a block that changed state counts for neither.

    tfringrun -np 2 python benchmarks/shm_chunk_ab.py [--blocks 6]
"""
import argparse
import os
import statistics

import numpy as np
import tensorflow as tf
from mpi4py import MPI

import tf_ring as hvd
from bench_util import core_label, core_latency_ns, core_state, print_table, timed
from gradient_step import aligned_empty, engine_alone, gradient_sizes

STAGED = "staged default"  # TF_RING_SHM_SINGLE_COPY=0: the measured chunk, never single copy
CHUNKS = [1 << 20, 2 << 20, 4 << 20, STAGED, None]  # None: unset, the default
SINGLE_COPY = "single copy"  # --single-copy: TF_RING_SHM_SINGLE_COPY=1, no staging


def chunk_label(chunk):
    if chunk == SINGLE_COPY:
        return "single-copy reads always"
    if chunk == STAGED:
        return "default, staging only"
    return "default (measured)" if chunk is None else "%d MiB chunks" % (chunk >> 20)


def set_variant(chunk):
    os.environ.pop("TF_RING_SHM_CHUNK_BYTES", None)
    os.environ.pop("TF_RING_SHM_SINGLE_COPY", None)
    if chunk == SINGLE_COPY:
        os.environ["TF_RING_SHM_SINGLE_COPY"] = "1"
    elif chunk == STAGED:
        os.environ["TF_RING_SHM_SINGLE_COPY"] = "0"
    elif chunk is not None:
        os.environ["TF_RING_SHM_CHUNK_BYTES"] = str(chunk)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--single-copy", action="store_true",
                        help="also run TF_RING_SHM_SINGLE_COPY=1 (peers' tensors read with process_vm_readv)")
    args = parser.parse_args()
    chunks = CHUNKS + ([SINGLE_COPY] if args.single_copy else [])
    comm = MPI.COMM_WORLD
    hvd.init()
    rng = np.random.default_rng(hvd.rank())
    big = rng.random(16 << 20, dtype=np.float32)
    big_out = np.empty_like(big)
    big_tensor = tf.constant(big)
    grads = [aligned_empty(int(n)) for n in gradient_sizes()]
    for g in grads:
        g[:] = rng.random(g.size, dtype=np.float32)
    grad_outs = [aligned_empty(g.size) for g in grads]
    grad_tensors = [tf.constant(g) for g in grads]
    grouped = tf.function(lambda *xs: hvd.grouped_allreduce(list(xs), op=hvd.Sum, name="chunk_ab_step"))

    works = {
        "64 MB eager allreduce": lambda: hvd.allreduce(big_tensor, op=hvd.Sum, name="chunk_ab")._numpy(),
        "160-gradient step, engine alone": lambda: engine_alone(grads, grad_outs),
        "160-gradient step, grouped tf.function": lambda: grouped(*grad_tensors)[-1]._numpy(),
    }
    mpi_works = {
        "64 MB eager allreduce": lambda: comm.Allreduce(big, big_out, op=MPI.SUM),
        "160-gradient step, engine alone": lambda: [comm.Allreduce(g, o, op=MPI.SUM) for g, o in zip(grads, grad_outs)],
    }
    mpi_works["160-gradient step, grouped tf.function"] = mpi_works["160-gradient step, engine alone"]
    times = {(w, c, s): [] for w in works for c in chunks + ["mpi4py"] for s in ("one L3", "two chiplets")}
    for block in range(args.blocks):
        for chunk in chunks:
            hvd.shutdown()
            set_variant(chunk)
            hvd.init()
            for fn in works.values():
                fn()  # warm-up: negotiation, tracing
            stats_before = hvd.stats()
            before = core_latency_ns()
            measured = {w: timed(fn, args.repeats, warmup=0)[0] for w, fn in works.items()}
            measured_mpi = {w: timed(fn, max(3, args.repeats // 2), warmup=0)[0] for w, fn in mpi_works.items()}
            after = core_latency_ns()
            stats_after = hvd.stats()
            small, direct = (stats_after[k] - stats_before[k]
                             for k in ("shm_small_chunk_batches", "shm_single_copy_batches"))
            state = core_state(before) if core_state(before) == core_state(after) != "?" else None
            if hvd.rank() == 0:
                print("block %d, %s, %s%s: %s; batches in 1 MiB chunks %d, single copy %d" % (
                    block, chunk_label(chunk), core_label(before, after), "" if state else " (not counted)",
                    ", ".join("%.2f ms" % (1e3 * t) for t in measured.values()), small, direct), flush=True)
            if state:
                for w in works:
                    times[(w, chunk, state)].append(measured[w])
                    times[(w, "mpi4py", state)].append(measured_mpi[w])
    set_variant(None)
    if hvd.rank() != 0:
        return

    def cell(values):
        return "%.2f (%d)" % (1e3 * statistics.median(values), len(values)) if values else "-"

    rows = []
    for w in works:
        for c in chunks + ["mpi4py"]:
            label = c if c == "mpi4py" else chunk_label(c)
            rows.append([w, label] + [cell(times[(w, c, s)]) for s in ("one L3", "two chiplets")])
    print_table("Shared-memory chunk sizes, %d ranks: median ms (blocks counted) by the state of the "
                "ranks' cores" % hvd.size(), ["work", "run with", "one L3", "two chiplets"], rows)
    big = "64 MB eager allreduce"
    for state in ("one L3", "two chiplets"):
        for variant in (None, STAGED):
            ours, theirs = times[(big, variant, state)], times[(big, "mpi4py", state)]
            if ours and theirs:
                ratio = statistics.median(theirs) / statistics.median(ours)
                print("goal: 64 MB at least 1.5x mpi4py; %s, %s: %.2fx: %s"
                      % (chunk_label(variant), state, ratio, "met" if ratio >= 1.5 else "not met"))


if __name__ == "__main__":
    main()
