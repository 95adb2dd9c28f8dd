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
                "autotune", "timeline", "eager_threads",
                "eager_inline_wait", "join",
                "init_comm", "local_variables", "tape", "v1_session"], {}),
    "process_sets": (["process_sets", "process_sets_dynamic", "process_sets_idle"], {}),
    "elastic": (["elastic_state", "elastic_data", "elastic_mirror"], {}),
    "keras": (["keras", "keras_mixed_precision", "keras_warmup_and_load", "keras_xla",
               "sync_batch_norm"], KERAS_ENV),
    "tf_keras": (["tf_keras", "tf_keras_mixed_precision", "tf_keras_warmup_and_load",
                  "tf_keras_xla", "sync_batch_norm_tf_keras", "elastic_tf_keras"], KERAS_ENV),
}


def _path(name):
    return os.path.join(PARALLEL_DIR, "mpi_%s.py" % name)


def test_every_parallel_file_is_in_exactly_one_group():
    grouped = [_path(name) for files, _ in GROUPS.values() for name in files]
    assert sorted(grouped) == sorted(glob.glob(os.path.join(PARALLEL_DIR, "mpi_*.py")))


@pytest.mark.parametrize("np", [2, 3])
@pytest.mark.parametrize("group", sorted(GROUPS))
def test_parallel_files(group, np):
    files, env = GROUPS[group]
    paths = [_path(name) for name in files]
    result = run_parallel_pytest(paths[0], np, env=env, extra=paths[1:], timeout=1500)
    # Every rank must have run the tests, not collected nothing.
    assert result.stdout.count(" passed") >= np, result.stdout[-4000:]
