"""Timing and table helpers shared by the benchmarks (run under tfringrun)."""
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from mpi4py import MPI  # noqa: E402


def timed(fn, repeats, warmup=3):
    """Median and min wall time (seconds) of fn() over `repeats` runs, all
    ranks starting each run together."""
    comm = MPI.COMM_WORLD
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        comm.Barrier()
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    # The slowest rank defines a collective's time.
    samples = comm.allreduce(samples, op=_elementwise_max)
    return statistics.median(samples), min(samples)


def interleaved(named_fns, repeats, blocks=5, warmup=3):
    """Median wall time (seconds) of each fn over `repeats` runs, taken in
    `blocks` rounds that visit every fn in turn: on this VM the machine's
    state drifts over seconds, and interleaving lays the drift on all the
    fns alike instead of on whichever ran during it. Returns {name: median}."""
    comm = MPI.COMM_WORLD
    for _, fn in named_fns:
        for _ in range(warmup):
            fn()
    per_block = max(1, repeats // blocks)
    samples = {name: [] for name, _ in named_fns}
    for _ in range(blocks):
        for name, fn in named_fns:
            for _ in range(per_block):
                comm.Barrier()
                start = time.perf_counter()
                fn()
                samples[name].append(time.perf_counter() - start)
    # The slowest rank defines a collective's time.
    return {name: statistics.median(comm.allreduce(s, op=_elementwise_max)) for name, s in samples.items()}


def _elementwise_max_fn(a, b, _datatype=None):
    return [max(x, y) for x, y in zip(a, b)]


_elementwise_max = MPI.Op.Create(_elementwise_max_fn, commute=True)


def print_table(title, header, rows):
    if MPI.COMM_WORLD.Get_rank() != 0:
        return
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(header)]
    line = " | ".join(str(h).rjust(w) for h, w in zip(header, widths))
    print("\n" + title)
    print(line)
    print("-+-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(str(c).rjust(w) for c, w in zip(r, widths)))


def ms(seconds):
    return "%.3f" % (seconds * 1e3)


def memory_bandwidth_gbs(seconds=0.3, mb=16):
    """GB/s one rank copies between two buffers while every rank does the
    same (the slowest rank's figure). Large allreduces inside one host are
    bound by it, and on a shared VM it changes from second to second."""
    import numpy as np
    comm = MPI.COMM_WORLD
    src = np.ones(mb << 18, np.float32)
    dst = np.empty_like(src)
    comm.Barrier()
    copied, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        np.copyto(dst, src)
        copied += src.nbytes
    rate = copied / (time.perf_counter() - start) / 1e9
    return comm.allreduce(rate, op=MPI.MIN)
