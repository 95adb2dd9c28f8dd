"""Lifecycle and topology: init, shutdown, rank, size and friends."""
import atexit

from tf_ring.runtime import process_set as _process_set
from tf_ring.runtime._library import ENGINE, build_info
from tf_ring.runtime._logging import get_logger
from tf_ring.runtime.topology import (NotInitializedError, _topology, cross_rank, cross_size,
                                      is_homogeneous, is_initialized, local_rank, local_size, rank,
                                      size)

_atexit_registered = False
_engine_comm = None  # the mpi4py communicator the engine runs on; None: MPI_COMM_WORLD


def _communicator(comm):
    """The mpi4py communicator to run on, or None for MPI_COMM_WORLD. A list
    of ranks builds a sub-communicator."""
    if comm is None:
        return None
    from mpi4py import MPI
    if isinstance(comm, (list, tuple)):
        world = MPI.COMM_WORLD
        comm = world.Create_group(world.Get_group().Incl(list(comm)))
        if comm == MPI.COMM_NULL:
            raise ValueError("this rank is not in the ranks passed to init(%s)" % (comm,))
    if not isinstance(comm, MPI.Comm):
        raise TypeError("init(comm=...) takes an mpi4py communicator or a list of ranks, got %r"
                        % type(comm).__name__)
    return comm


def init(comm=None, process_sets=None):
    """Starts the engine on this process. Safe to call again (a no-op).

    comm: optional mpi4py communicator (or list of world ranks) to run on;
    default MPI_COMM_WORLD. Works whether or not mpi4py initialized MPI.
    process_sets: ProcessSet objects to register (ids 1, 2, ... in this
    order; every rank passes the same list), or "dynamic" to allow
    add_process_set/remove_process_set (see docs/process-sets.md).
    """
    global _atexit_registered
    was_running = is_initialized()
    global _engine_comm
    communicator = _communicator(comm)
    try:
        ENGINE.init(communicator)
    except RuntimeError as e:
        raise RuntimeError("tf_ring.init() failed: %s" % e) from None
    if not _atexit_registered:
        # Stop the engine thread before MPI is finalized at interpreter exit.
        atexit.register(ENGINE.finalize_mpi)
        _atexit_registered = True
    if not was_running:
        _engine_comm = communicator
        _process_set._on_init(process_sets, _agreed_settings())
    elif process_sets is not None:
        raise ValueError("tf_ring.init(process_sets=...): the engine is already running; call "
                         "shutdown() first, or add sets with add_process_set().")
    t = _topology()
    get_logger().info("initialized: rank %d of %d (local rank %d of %d)", t["rank"], t["size"],
                      t["local_rank"], t["local_size"])


def shutdown():
    """Stops the engine on every rank; ops still pending fail with an error."""
    ENGINE.shutdown()


def mpi_built():
    return True


def mpi_enabled():
    """Whether collectives run over MPI: always, in tf_ring."""
    return True


def gloo_built():
    return False


def gloo_enabled():
    return False


def ccl_built():
    return False


def ddl_built():
    return False


def rocm_built():
    return False


def cuda_built():
    """Whether this build has CUDA support (a CUDA/NCCL build, see build_info())."""
    return build_info().get("build") == "cuda"


def nccl_built():
    """True when this tf_ring was built with CUDA and NCCL (GPU tensors)."""
    return build_info().get("build") == "cuda"


def mpi_threads_supported():
    from mpi4py import MPI
    return MPI.Query_thread() == MPI.THREAD_MULTIPLE


STAT_NAMES = ("cycles", "negotiations", "cache_hits", "cache_misses", "fused_batches", "tensors",
              "bytes", "hierarchical_batches", "caller_finished", "shm_small_chunk_batches",
              "shm_single_copy_batches", "shm_kept_on_cpu_batches", "scratch_bytes")


def stats(process_set=None):
    """Engine counters since init() (see docs/engine-settings.md): those of the
    global set, or of `process_set` when given."""
    if process_set is None:
        return ENGINE.stats()
    return ENGINE.stats(_process_set.process_set_id_of(process_set, "stats")) or {}


def reset_stats():
    ENGINE.reset_stats()


def _agreed_settings():
    """{variable: rank 0's value, or None where rank 0 left it unset} for every
    TF_RING_* variable the ranks must share (docs/engine-settings.md)."""
    return ENGINE.agreed_settings()


def engine_params():
    """The engine parameters in force, and how they changed (autotune).

    Returns a dict: fusion_threshold (bytes), cycle_time_ms, autotune ("off",
    "tuning" or "settled"), history, a list of (cycle, fusion_threshold,
    cycle_time_ms) for every change, where cycle is the engine cycle it took
    effect after, and settings, {variable: value or None (unset)}: rank 0's
    TF_RING_* settings, which every rank runs with. Every rank makes the same
    changes at the same cycles.
    """
    return ENGINE.engine_params()


__all__ = ["init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
           "cross_rank", "cross_size", "is_homogeneous", "mpi_built", "mpi_enabled",
           "gloo_built", "gloo_enabled", "ccl_built", "ddl_built", "cuda_built", "rocm_built",
           "nccl_built", "mpi_threads_supported",
           "stats", "reset_stats", "engine_params", "build_info", "NotInitializedError"]
