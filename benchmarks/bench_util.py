"""Timing and table helpers shared by the benchmarks (run under tfringrun)."""
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from mpi4py import MPI  # noqa: E402


def _each_run(fn, count, comm):
    """Wall time (seconds) of `count` runs of fn(), all ranks starting each together."""
    samples = []
    for _ in range(count):
        comm.Barrier()
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def timed(fn, repeats, warmup=3):
    """Median and min wall time (seconds) of fn() over `repeats` runs, all
    ranks starting each run together."""
    comm = MPI.COMM_WORLD
    for _ in range(warmup):
        fn()
    # The slowest rank defines a collective's time.
    samples = comm.allreduce(_each_run(fn, repeats, comm), op=_elementwise_max)
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
            samples[name] += _each_run(fn, per_block, comm)
    return {name: statistics.median(comm.allreduce(s, op=_elementwise_max)) for name, s in samples.items()}


def stamped_runs(fn, repeats):
    """(start, submit, taken, agreed, done, end) in ns for each run of fn()
    whose stages the engine stamped in order (cc/common/observability/
    stage_probe.h; a run whose request waited a cycle for the peer still
    counts: its wait is in negotiation). The start and end are this
    script's own stamps, on the same clock."""
    from tf_ring._library import ENGINE  # imports TensorFlow: only where asked for
    comm = MPI.COMM_WORLD
    ENGINE.stage_probe(True)
    rows = []
    for _ in range(repeats):
        comm.Barrier()
        start = time.perf_counter_ns()
        fn()
        end = time.perf_counter_ns()
        rows.append((start,) + tuple(ENGINE.stage_stamps()) + (end,))
    ENGINE.stage_probe(False)
    return [r for r in rows if all(r[i] <= r[i + 1] for i in range(5)) and r[1] > 0]


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
