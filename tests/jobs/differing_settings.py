"""Job for test_agreed_settings: engine settings set differently on one rank.

Each scenario sets TF_RING_* variables in one rank's environment only, starts
the engine, runs collectives whose result (or whose not hanging) depends on
every rank using the same value, checks them against NumPy and checks that
the engine reports rank 0's values, then shuts the engine down. Every rank
prints "rank R: SCENARIO: ok"; a wrong result raises, failing the job. The
warnings the differing ranks print are checked by the test.

It drives tf_ring's own native library through the engine-only binding
(TF_RING_ENGINE_LIB names tf_ring/_tf_ring.so), so no rank pays for importing
TensorFlow; the Python side of the same rules is tested in
tests/parallel/ranks/mpi_cache_fusion.py and mpi_process_sets_dynamic.py.

    python differing_settings.py [SCENARIO ...]   (default: all of them)
"""
import os
import sys

import numpy as np

import tf_ring_engine as engine

RANK = int(os.environ["OMPI_COMM_WORLD_RANK"])
SIZE = int(os.environ["OMPI_COMM_WORLD_SIZE"])
ODD = SIZE - 1  # the rank whose environment differs, unless a scenario says 0
RANKS = np.arange(SIZE)


def check_equal(what, got, want):
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or not np.array_equal(got, want):
        raise SystemExit("rank %d: %s: got %s, want %s" % (RANK, what, _short(got), _short(want)))


def _short(values):
    text = repr(values.tolist())
    return text if len(text) < 300 else text[:300] + "..."


def allreduce_sum(values, name):
    return engine.allreduce(np.asarray(values, dtype=np.float32), op=engine.Sum, name=name).wait()


def fusion():
    # The issue's case: rank ODD alone fused nothing and the sums came out wrong, then hung.
    for step in range(3):
        a, b = [p.wait() for p in engine.grouped_allreduce(
            [np.full(3, RANK + 1, np.float32), np.full(5, 10 * (RANK + 1), np.float32)],
            op=engine.Sum, name="fusion.group")]
        check_equal("grouped sum a, step %d" % step, a, np.full(3, float((RANKS + 1).sum())))
        check_equal("grouped sum b, step %d" % step, b, np.full(5, float((10 * (RANKS + 1)).sum())))


def cache():
    # More distinct tensors than the smaller cache holds, several rounds, so
    # hits, misses and evictions all happen.
    for step in range(3):
        for i in range(12):
            out = allreduce_sum([RANK * 100 + i, 1.0], "cache.t%d" % i)
            check_equal("cache.t%d step %d" % (i, step), out,
                        [float((RANKS * 100 + i).sum()), float(SIZE)])


def large_sum(name, count):
    values = np.arange(count, dtype=np.float32) % 1000
    out = allreduce_sum(values + RANK, name)
    check_equal(name, out, values * SIZE + float(RANKS.sum()))


def transport():
    # Shared memory on some ranks and MPI on the others, or shared-memory
    # chunks of different sizes, cannot meet; 300000 floats span chunks.
    for step in range(2):
        large_sum("transport.big", 300000)
        large_sum("transport.small", 7)
    fusion()


def engine_runs():
    large_sum("plain.sum", 10)


# name: (rank whose environment differs, its variables, the collectives, what
# engine_params() must report on every rank)
SCENARIOS = {
    "fusion": (ODD, {"TF_RING_FUSION_THRESHOLD": "0"}, fusion,
               {"fusion_threshold": 64 << 20}),
    "fusion_rank0": (0, {"TF_RING_FUSION_THRESHOLD": "0"}, fusion, {"fusion_threshold": 0}),
    "cache": (ODD, {"TF_RING_CACHE_CAPACITY": "2"}, cache, {}),
    "shm": (ODD, {"TF_RING_SHM": "0"}, transport, {}),
    "chunk": (ODD, {"TF_RING_SHM_CHUNK_BYTES": "4096"}, transport, {}),
    "cycle": (ODD, {"TF_RING_CYCLE_TIME": "7"}, engine_runs, {"cycle_time_ms": 0.0}),
    "hierarchical": (ODD, {"TF_RING_HIERARCHICAL": "sideways"}, engine_runs, {}),
    # Across hosts this rank alone would go flat while the others go hierarchical.
    "hierarchical_off": (ODD, {"TF_RING_HIERARCHICAL": "0"}, transport, {}),
    "autotune": (ODD, {"TF_RING_AUTOTUNE": "1"}, engine_runs, {"autotune": "off"}),
    # Read by the Python side (add_process_set), carried by the engine.
    "dynamic": (0, {"TF_RING_DYNAMIC_PROCESS_SETS": "1"}, engine_runs, {}),
    "rank0_only": (ODD, {"TF_RING_STALL_CHECK_TIME_SECONDS": "0",
                         "TF_RING_STALL_SHUTDOWN_TIME_SECONDS": "5",
                         "TF_RING_TIMELINE_MARK_CYCLES": "1",
                         "TF_RING_AUTOTUNE_WARMUP_SAMPLES": "4"}, engine_runs, {}),
}


def run(name):
    odd, variables, collectives, expected = SCENARIOS[name]
    saved = dict(os.environ)
    if RANK == odd:
        os.environ.update(variables)
    try:
        engine.init()
        collectives()
        params = engine.engine_params()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    for key, want in expected.items():
        check_equal("%s: engine_params()[%r]" % (name, key), params[key], want)
    # Every rank reports rank 0's variables, whatever its own environment held.
    rank0 = dict(saved, **(variables if odd == 0 else {}))
    settings = params["settings"]
    want = {k: rank0.get(k) for k in set(settings) | set(variables)}
    if settings != want:
        raise SystemExit("rank %d: %s: the engine reports settings %r, want rank 0's %r"
                         % (RANK, name, settings, want))
    engine.shutdown()
    print("rank %d: %s: ok" % (RANK, name), flush=True)


for scenario in sys.argv[1:] or list(SCENARIOS):
    run(scenario)
