"""Elastic training with Horovod's names: `run`, the State classes, commit,
restore and sync in memory, the exceptions that drive recovery, and
shard_dataset for re-sharding a tf.data epoch after a reset.

What exists and what does not yet (in-process recovery from a lost rank
needs the engine's ULFM support; tfringrun's elastic mode restarts every
rank instead): docs/elastic.md.
"""
from tf_ring.elastic.errors import (HorovodInternalError, HostUpdateResult,
                                    HostsUpdatedInterrupt, ResetLimitError)
from tf_ring.elastic.data import samples_per_step, shard_dataset, steps_left
from tf_ring.elastic.hosts import set_host_update_source
from tf_ring.elastic.recovery import (reset, reset_count, reset_limit, run, set_reset_hook,
                                 set_reset_limit)
from tf_ring.elastic.state import ObjectState, State
from tf_ring.elastic.tf_state import TensorFlowKerasState, TensorFlowState

__all__ = ["HorovodInternalError", "HostUpdateResult", "HostsUpdatedInterrupt", "ObjectState",
           "ResetLimitError", "State", "TensorFlowKerasState", "TensorFlowState", "reset",
           "reset_count", "reset_limit", "run", "samples_per_step", "set_host_update_source",
           "set_reset_hook", "set_reset_limit", "shard_dataset", "steps_left"]
