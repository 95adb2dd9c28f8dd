"""The shared-memory allreduce always staged (TF_RING_SHM_SINGLE_COPY=0)
against always single-copy reads of the peers' tensors
(TF_RING_SHM_SINGLE_COPY=1, process_vm_readv; the default, auto, picks
between them per allreduce by the cores' measured state),
with mpi4py's Allreduce on the same buffers, in one run. The engine is
restarted between the two settings, which alternate in blocks so that
drift on a busy machine falls on both alike. Also prints how fast the
kernel copies between processes here next to a plain memory copy, which is
what decides between the two paths.

    tfringrun -np 2 python benchmarks/shm_single_copy.py [--blocks 3]
"""
import argparse
import ctypes
import os
import statistics
import time

import numpy as np
import tensorflow as tf
from mpi4py import MPI

import tf_ring as hvd
from bench_util import ms, print_table, timed
from gradient_step import gradient_sizes

SIZES_MB = [0.25, 1, 4, 16, 64]


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def copy_rates(mb=16, repeats=10):
    """GB/s of process_vm_readv from the next rank, and of a NumPy copy."""
    comm = MPI.COMM_WORLD
    n = int(mb * (1 << 20))
    mine = np.full(n, comm.rank, np.uint8)
    into = np.empty(n, np.uint8)
    peers = comm.allgather((os.getpid(), mine.ctypes.data))
    pid, address = peers[(comm.rank + 1) % comm.size]
    libc = ctypes.CDLL(None, use_errno=True)
    piece = 256 << 10
    locals_ = (_Iovec * (n // piece))(*[_Iovec(into.ctypes.data + o, piece) for o in range(0, n, piece)])
    remotes = (_Iovec * (n // piece))(*[_Iovec(address + o, piece) for o in range(0, n, piece)])
    rates = {}
    for name, fn in (("process_vm_readv", lambda: libc.process_vm_readv(
            pid, locals_, len(locals_), remotes, len(remotes), 0) == n),
            ("memcpy", lambda: np.copyto(into, mine) is None)):
        best = float("inf")
        for _ in range(repeats):
            comm.Barrier()
            start = time.perf_counter()
            ok = fn()
            best = min(best, time.perf_counter() - start)
        rates[name] = n / best / 1e9 if ok else 0.0  # 0: the kernel refused the read
    comm.Barrier()  # every peer has finished reading `mine`
    return comm.allreduce(rates["process_vm_readv"], op=MPI.MIN), comm.allreduce(rates["memcpy"], op=MPI.MIN)


def restart(single_copy):
    hvd.shutdown()
    os.environ["TF_RING_SHM_SINGLE_COPY"] = "1" if single_copy else "0"
    hvd.init()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=11)
    args = parser.parse_args()
    hvd.init()
    comm = MPI.COMM_WORLD
    rng = np.random.default_rng(hvd.rank())
    cases = []
    for mb in SIZES_MB:
        data = rng.random(int(mb * (1 << 20)) // 4, dtype=np.float32)
        cases.append(("%g MB" % mb, [data]))
    cases.append(("160 gradients (21.6 MB)", [rng.random(n, dtype=np.float32) for n in gradient_sizes()]))

    step = tf.function(lambda ts: [hvd.allreduce(t, op=hvd.Sum) for t in ts])
    times = {(name, path): [] for name, _ in cases for path in ("mpi4py", "staged", "single copy")}
    for block in range(args.blocks):
        for single_copy in (False, True) if block % 2 == 0 else (True, False):
            restart(single_copy)
            for name, arrays in cases:
                tensors = [tf.constant(a) for a in arrays]
                t, _ = timed(lambda: step(tensors)[-1].numpy(), args.repeats)
                times[(name, "single copy" if single_copy else "staged")].append(t)
        for name, arrays in cases:
            outs = [np.empty_like(a) for a in arrays]

            def run_mpi():
                for a, o in zip(arrays, outs):
                    comm.Allreduce(a, o, op=MPI.SUM)
            times[(name, "mpi4py")].append(timed(run_mpi, args.repeats)[0])

    rows = []
    for name, _ in cases:
        t = {path: statistics.median(times[(name, path)]) for path in ("mpi4py", "staged", "single copy")}
        rows.append([name, ms(t["mpi4py"]), ms(t["staged"]), ms(t["single copy"]),
                     "%.2f" % (t["single copy"] / t["staged"]), "%.2fx" % (t["mpi4py"] / t["staged"]),
                     "%.2fx" % (t["mpi4py"] / t["single copy"])])
    print_table("Shared-memory allreduce in a tf.function, %d ranks, median ms of %d blocks "
                "(speedup = mpi4py time / tf_ring time)" % (hvd.size(), args.blocks),
                ["size", "mpi4py", "staged", "single copy", "single/staged",
                 "speedup staged", "speedup single"], rows)
    readv, memcpy = copy_rates()
    if hvd.rank() == 0:
        print("copy from a peer process: %s (process_vm_readv, 256 KB pieces); "
              "within a process: %.1f GB/s (memcpy)"
              % ("%.1f GB/s" % readv if readv > 0 else "refused by the kernel", memcpy))


if __name__ == "__main__":
    main()
