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
    from tf_ring.runtime._library import ENGINE  # imports TensorFlow: only where asked for
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


_PROBE_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shm_chunk_probe.cc")
_PROBE = os.path.join(os.environ.get("TMPDIR", "/tmp"), "tf_ring_shm_chunk_probe")


def core_latency_ns():
    """One-way cache-line latency between CPUs 0 and 1 (shm_chunk_probe.cc,
    compiled on first use), measured by rank 0 while the other ranks sleep
    off the CPUs; None where it cannot be built. On the 2-core EPYC VM under
    100 ns means the ranks' cores share an L3 and over 120 ns that they sit
    on two chiplets, where staged shared-memory traffic slows
    (benchmarks/README.md, 'Chunks that do not bounce'). Another job busy on
    those CPUs makes it read high too: benchmark an idle machine."""
    import subprocess
    comm = MPI.COMM_WORLD
    ns = None
    comm.Barrier()
    if comm.rank == 0:
        try:
            if not os.path.exists(_PROBE):
                subprocess.run(["g++", "-O3", "-march=native", "-o", _PROBE, _PROBE_SOURCE],
                               check=True, capture_output=True)
            ns = float(subprocess.run([_PROBE, "--one-way"], capture_output=True, text=True,
                                      check=True).stdout)
        except (OSError, subprocess.CalledProcessError, ValueError):
            ns = None
    else:
        time.sleep(0.15)
    return comm.bcast(ns, root=0)


def core_label(before, after):
    """'45/52 ns, one L3': two core_latency_ns() readings and the state they agree on."""
    show = lambda ns: "?" if ns is None else "%.0f" % ns
    state = core_state(before) if core_state(before) == core_state(after) else "changed"
    return "%s/%s ns, %s" % (show(before), show(after), state)


def core_state(ns):
    """'one L3', 'two chiplets' or '?' for a core_latency_ns() reading."""
    if ns is None:
        return "?"
    return "one L3" if ns < 100 else "two chiplets" if ns > 120 else "?"

