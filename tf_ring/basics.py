"""Lifecycle and topology: init, shutdown, rank, size and friends."""
import atexit
import ctypes

from tf_ring import process_set as _process_set
from tf_ring._library import C_API, build_info
from tf_ring._logging import get_logger
from tf_ring.topology import (NotInitializedError, _topology, cross_rank, cross_size,
                              is_homogeneous, is_initialized, local_rank, local_size, rank,
                              size)

_atexit_registered = False


def _comm_handle(comm):
    """Returns a ctypes pointer to the MPI_Comm behind an mpi4py communicator,
    or None for MPI_COMM_WORLD. A list of ranks builds a sub-communicator."""
    if comm is None:
        return None, None
    from mpi4py import MPI
    if isinstance(comm, (list, tuple)):
        world = MPI.COMM_WORLD
        comm = world.Create_group(world.Get_group().Incl(list(comm)))
        if comm == MPI.COMM_NULL:
            raise ValueError("this rank is not in the ranks passed to init(%s)" % (comm,))
    if not isinstance(comm, MPI.Comm):
        raise TypeError("init(comm=...) takes an mpi4py communicator or a list of ranks, got %r"
                        % type(comm).__name__)
    handle = ctypes.c_void_p(MPI._handleof(comm))
    return ctypes.cast(ctypes.pointer(handle), ctypes.c_void_p), (comm, handle)


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
    pointer, _keepalive = _comm_handle(comm)
    error = ctypes.create_string_buffer(1024)
    if C_API.tf_ring_init(pointer, error, len(error)) != 0:
        raise RuntimeError("tf_ring.init() failed: " + error.value.decode())
    if not _atexit_registered:
        # Stop the engine thread before MPI is finalized at interpreter exit.
        atexit.register(C_API.tf_ring_finalize_mpi)
        _atexit_registered = True
    if not was_running:
        _process_set._on_init(process_sets, _agreed_settings())
    elif process_sets is not None:
        raise ValueError("tf_ring.init(process_sets=...): the engine is already running; call "
                         "shutdown() first, or add sets with add_process_set().")
    topology = _topology()
    get_logger().info("initialized: rank %d of %d (local rank %d of %d)", *topology[:4])


def shutdown():
    """Stops the engine on every rank; ops still pending fail with an error."""
    C_API.tf_ring_shutdown()


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
              "bytes", "hierarchical_batches", "scratch_bytes")


def stats(process_set=None):
    """Engine counters since init() (see docs/engine-settings.md): those of the
    global set, or of `process_set` when given."""
    values = (ctypes.c_int64 * len(STAT_NAMES))()
    if process_set is None:
        count = C_API.tf_ring_stats(values, len(values))
    else:
        set_id = _process_set.process_set_id_of(process_set, "stats")
        count = C_API.tf_ring_process_set_stats(set_id, values, len(values))
    return {name: int(values[i]) for i, name in enumerate(STAT_NAMES[:max(count, 0)])}


def reset_stats():
    C_API.tf_ring_reset_stats()


_AUTOTUNE_STATES = {0: "off", 1: "tuning", 2: "settled"}


def _agreed_settings():
    """{variable: rank 0's value, or None where rank 0 left it unset} for every
    TF_RING_* variable the ranks must share (docs/engine-settings.md)."""
    size = C_API.tf_ring_agreed_settings(None, 0)
    buffer = ctypes.create_string_buffer(max(size, 1))
    size = min(size, C_API.tf_ring_agreed_settings(buffer, len(buffer)))
    settings = {}
    for entry in buffer.raw[:size].decode("utf-8", "replace").split("\0"):
        if entry:
            name, has_value, value = entry.partition("=")
            settings[name] = value if has_value else None
    return settings


def engine_params():
    """The engine parameters in force, and how they changed (autotune).

    Returns a dict: fusion_threshold (bytes), cycle_time_ms, autotune ("off",
    "tuning" or "settled"), history, a list of (cycle, fusion_threshold,
    cycle_time_ms) for every change, where cycle is the engine cycle it took
    effect after, and settings, {variable: value or None (unset)}: rank 0's
    TF_RING_* settings, which every rank runs with. Every rank makes the same
    changes at the same cycles.
    """
    values = (ctypes.c_int64 * 4)()
    C_API.tf_ring_engine_params(values)
    count = int(values[3])
    raw = (ctypes.c_int64 * (3 * max(count, 1)))()
    written = C_API.tf_ring_param_history(raw, count)
    history = [(int(raw[3 * i]), int(raw[3 * i + 1]), raw[3 * i + 2] / 1000.0) for i in range(written)]
    return {"fusion_threshold": int(values[0]), "cycle_time_ms": values[1] / 1000.0,
            "autotune": _AUTOTUNE_STATES.get(int(values[2]), "unknown"), "history": history,
            "settings": _agreed_settings()}


__all__ = ["init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
           "cross_rank", "cross_size", "is_homogeneous", "mpi_built", "mpi_enabled",
           "gloo_built", "gloo_enabled", "ccl_built", "ddl_built", "cuda_built", "rocm_built",
           "nccl_built", "mpi_threads_supported",
           "stats", "reset_stats", "engine_params", "build_info", "NotInitializedError"]
