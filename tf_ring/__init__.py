"""tf_ring: Horovod-style ring-allreduce data-parallel training for TensorFlow.

Migration from Horovod is one line: ``import tf_ring as hvd``.

The API loads on first use: ``import tf_ring.run`` (the launcher) and
``import tf_ring.timeline`` (the summary tool) must start instantly and work
where TensorFlow or the native library is missing or mismatched, so this
package imports neither until a name below is asked for.
"""
import importlib

# Public name -> the module defining it (tf_ring/runtime, collectives and
# training are the rooms of the rank's side: docs/architecture.md).
_API = {
    "tf_ring.runtime.basics": [
        "NotInitializedError", "build_info", "cross_rank", "cross_size", "init", "is_initialized",
        "local_rank", "local_size", "mpi_built", "mpi_threads_supported", "nccl_built", "rank",
        "reset_stats", "shutdown", "size", "stats", "engine_params",
        # Horovod's build and topology queries
        "ccl_built", "cuda_built", "ddl_built", "gloo_built", "gloo_enabled", "is_homogeneous",
        "mpi_enabled", "rocm_built"],
    "tf_ring.runtime.process_set": ["ProcessSet", "add_process_set", "global_process_set",
                                    "process_set_by_id", "process_sets", "remove_process_set"],
    "tf_ring.runtime.timeline_control": ["start_timeline", "stop_timeline"],
    "tf_ring.collectives.ops": ["Average", "Max", "Min", "Product", "Sum", "allgather",
                                "allreduce", "broadcast", "Adasum"],
    "tf_ring.collectives.compression": ["Compression"],
    "tf_ring.collectives.exchange": ["alltoall", "reducescatter"],
    "tf_ring.collectives.grouped": ["grouped_allreduce", "grouped_allgather",
                                    "grouped_reducescatter"],
    "tf_ring.collectives.joining": ["join"],
    "tf_ring.collectives.objects": ["allgather_object", "broadcast_object", "broadcast_object_fn"],
    "tf_ring.collectives.variables": ["broadcast_", "broadcast_global_variables",
                                      "broadcast_variables"],
    "tf_ring.collectives.runtime_ops": ["barrier", "local_rank_op", "local_size_op",
                                        "process_set_included_op", "rank_op", "size_op"],
    "tf_ring.training.tape": ["DistributedGradientTape", "PartialDistributedGradientTape"],
    "tf_ring.training.hooks": ["BroadcastGlobalVariablesHook"],
    "tf_ring.distributed_optimizer": ["DistributedOptimizer"],
    # Elastic training's exceptions, at the top as horovod.torch has them
    # (horovod.tensorflow keeps them in horovod.common.exceptions).
    "tf_ring.elastic.errors": ["HorovodInternalError", "HostsUpdatedInterrupt"],
}
_HOME = {name: module for module, names in _API.items() for name in names}
# Public names that need Keras: loaded only when asked for, so that
# `import tf_ring` and the collectives never import Keras.
_KERAS_HOME = {"SyncBatchNormalization": "tf_ring.keras._sync_batch_norm"}
# Submodules reachable as attributes, as `hvd.elastic.run` is in Horovod.
_SUBMODULES = {"elastic": "tf_ring.elastic"}
__all__ = sorted(list(_HOME) + list(_KERAS_HOME) + list(_SUBMODULES)) + ["__version__"]


def _load_api():
    """Imports every API module once (the ops' gradients register here)."""
    importlib.import_module("tf_ring.collectives._gradients")
    for module in _API:
        importlib.import_module(module)


def __getattr__(name):
    if name == "__version__":
        from tf_ring.runtime._build_info import tf_ring_version
        return tf_ring_version()
    if name == "_xla_support":  # whether collectives compile under jit_compile=True
        from tf_ring.runtime._build_info import xla_support
        return xla_support()
    if name == "_executing_eagerly":  # horovod.tensorflow has it; Horovod's tests call it
        import tensorflow
        return tensorflow.executing_eagerly
    if name in _SUBMODULES:
        _load_api()
        return importlib.import_module(_SUBMODULES[name])
    home = _HOME.get(name) or _KERAS_HOME.get(name)
    if home is None:
        raise AttributeError("module 'tf_ring' has no attribute %r" % name)
    _load_api()
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
