"""Runs every tests/parallel/ranks/mpi_*.py file on 2 and on 3 real processes.

The mpi_ prefix keeps the single-process run from collecting them.

Each parallel file asserts, on every rank, results computed independently
with NumPy from all ranks' known inputs.

Files run in groups, one launch per group and rank count: a launch costs
about 10 s of start-up (mpirun, and TensorFlow imported on every rank),
which one launch per file paid 88 times. parallel/conftest.py restarts the
engine with the launch's settings between files, so each file still starts
from a fresh engine. The Keras 3 and tf_keras files need separate processes
(TF_USE_LEGACY_KERAS is read once per process).

On 3 ranks a group runs what 3 ranks prove beyond 2 (THREE_RANKS): an odd
ring, a rank outside a process set, a count that is no power of two. The
Keras groups' other tests, and the engine group's tape, v1 and
local-variable files, check the glue around an allreduce whose ring is
proved on 3 ranks by the collectives group; rerunning them there cost
about three minutes (docs/testing.md).
"""
import glob
import os

import pytest

from conftest import PARALLEL_DIR, run_parallel_pytest

# Stall settings for the Keras groups: a hang fails in a minute, not at the
# launch's timeout; a slow first XLA compile on a loaded machine is no stall.
KERAS_ENV = {"TF_RING_STALL_CHECK_TIME_SECONDS": "5", "TF_RING_STALL_SHUTDOWN_TIME_SECONDS": "60"}

GROUPS = {
    "collectives": (["collectives", "grouped_and_objects", "grouped_exchange", "exchange",
                     "broadcast_inplace", "adasum", "horovod_args", "mismatch_errors",
                     "collective_limits", "runtime_ops", "loops", "out_of_step"], {}),
    "engine": (["cache_fusion", "shm_single_copy", "shm_staged", "shm_small", "shm_chunk_choice",
                "shm_cpu_home",
                "autotune", "timeline", "eager_threads",
                "eager_inline_wait", "join",
                "init_comm", "local_variables", "tape", "v1_session"], {}),
    "process_sets": (["process_sets", "process_sets_errors", "process_sets_dynamic",
                      "process_sets_idle"], {}),
    "elastic": (["elastic_state", "elastic_data", "elastic_mirror"], {}),
    "keras": (["keras", "keras_mixed_precision", "keras_warmup_and_load", "keras_xla",
               "sync_batch_norm", "compression", "keras_stop", "keras_sharded"], KERAS_ENV),
    "tf_keras": (["tf_keras", "tf_keras_mixed_precision", "tf_keras_warmup_and_load",
                  "tf_keras_xla", "sync_batch_norm_tf_keras", "elastic_tf_keras",
                  "compression_tf_keras", "tf_keras_stop"], KERAS_ENV),
}


# The tests each group runs on 3 ranks (a pytest -k expression; None: all), and why.
THREE_RANKS = {
    # A ring of odd length: chunks that do not split evenly, alltoall and
    # reducescatter splits over three peers.
    "collectives": None,
    # Shared-memory reductions summed in rank order from three writers;
    # join's divisor (the ranks that submitted) when it is neither 1 nor the
    # world; fusion and the cache with three peers; a sub-communicator that
    # is neither one rank nor the world; threads' names and the timeline
    # with three ranks' events; engine threads kept on CPUs of their own
    # only while there are CPUs enough (three ranks on a 2-CPU host: none);
    # the tape's accumulated passes, whose sums three ranks average. The
    # rest of the tape, the v1 session, local variables,
    # autotune and the eager inline wait are glue around an allreduce whose
    # odd ring the collectives group proves: they run on 2 ranks only.
    "engine": ("shm or join or cache_fusion or init_comm or eager_threads or timeline"
               " or backward_passes"),
    # Sets that are neither one rank nor the world exist only from 3 ranks on.
    "process_sets": None,
    # The newest commit on a rank that is neither rank 0 nor its only peer;
    # shards of three ranks' steps.
    "elastic": None,
    # A rank outside the training process set, and Adasum refused for a count
    # that is no power of two (under XLA too): neither happens on 2 ranks;
    # a stop on the last of three ranks, whose neighbours both go on.
    # Sparse gradients gathered from three ranks' rows follow plain Keras on
    # the global batch (an uneven count of repeated rows per token). Sharded
    # optimizer state: trajectories, shares and the broadcast with segments
    # of three ranks (variables and an Embedding cut between them, a rank
    # owning no dense rows); its refusals and other optimizers are glue.
    "keras": ("process_set or adasum or stop_inside or sparse_adam or sharded_adam_follows "
              "or sharded_state or sharded_broadcast"),
    "tf_keras": "process_set or adasum or sparse_adam",
}


def _path(name):
    return os.path.join(PARALLEL_DIR, "mpi_%s.py" % name)


def test_every_group_says_what_it_runs_on_3_ranks():
    assert sorted(THREE_RANKS) == sorted(GROUPS)


def test_every_parallel_file_is_in_exactly_one_group():
    grouped = [_path(name) for files, _ in GROUPS.values() for name in files]
    assert sorted(grouped) == sorted(glob.glob(os.path.join(PARALLEL_DIR, "mpi_*.py")))


@pytest.mark.parametrize("np", [2, 3])
@pytest.mark.parametrize("group", sorted(GROUPS))
def test_parallel_files(group, np):
    files, env = GROUPS[group]
    paths = [_path(name) for name in files]
    select = THREE_RANKS[group] if np == 3 else None
    extra = paths[1:] + (["-k", select] if select else [])
    # Every rank must run the same tests, all passing (a skip on a rank skips this test).
    run_parallel_pytest(paths[0], np, env=env, extra=extra, timeout=1500)
