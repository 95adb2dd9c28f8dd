"""Elastic training with Horovod's names: `run`, the State classes, commit,
restore and sync in memory, the exceptions that drive recovery, and
shard_dataset for re-sharding a tf.data epoch after a reset.

A lost rank is survived either by restarting every rank from the last
commit (tfringrun's elastic mode) or in-process, the survivors shrinking
the communicator and going on without a restart (`--recovery in-process`,
MPI ULFM: tf_ring.elastic.in_process). What each mode covers, and what
neither does yet: docs/elastic.md.

The names load on first use, as in the top-level package: the launcher
imports tf_ring.elastic.notices, and must start where TensorFlow is
missing (the GPU machine has none).
"""
import importlib

# Public name -> the module defining it.
_API = {
    "tf_ring.elastic.errors": ["HorovodInternalError", "HostUpdateResult", "HostsUpdatedInterrupt",
                               "ResetLimitError"],
    "tf_ring.elastic.data": ["samples_per_step", "shard_dataset", "steps_left"],
    "tf_ring.elastic.hosts": ["set_host_update_source"],
    "tf_ring.elastic.recovery": ["reset", "reset_count", "reset_limit", "run", "set_reset_hook",
                                 "set_reset_limit"],
    "tf_ring.elastic.state": ["ObjectState", "State"],
    "tf_ring.elastic.tf_state": ["TensorFlowKerasState", "TensorFlowState"],
}
_WHERE = {name: module for module, names in _API.items() for name in names}

__all__ = sorted(_WHERE)


def __getattr__(name):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError("module 'tf_ring.elastic' has no attribute %r" % name)
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
