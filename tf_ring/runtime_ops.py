"""Topology as graph ops, read when they run (Horovod's rank_op and friends),
and barrier(). A v1 graph built before init() gives the right values when it
runs after init()."""
import tensorflow as tf

from tf_ring._library import OPS
from tf_ring.ops import _normalize_name


def _check_process_set(what, process_set_id):
    # This build has only the global process set, whose id is 0.
    if process_set_id != 0:
        raise ValueError("tf_ring.%s: process set %r does not exist; this build has only the "
                         "global process set (process_set_id=0)." % (what, process_set_id))


def rank_op(name=None):
    """This process's rank as an int32 scalar tensor, read when the op runs."""
    return OPS.tf_ring_topology(which="rank", name=name)


def local_rank_op(name=None):
    """This process's rank on its node as an int32 scalar tensor, read when the op runs."""
    return OPS.tf_ring_topology(which="local_rank", name=name)


def size_op(process_set_id=0, name=None):
    """The number of ranks as an int32 scalar tensor, read when the op runs."""
    _check_process_set("size_op", process_set_id)
    return OPS.tf_ring_topology(which="size", name=name)


def local_size_op(name=None):
    """The number of ranks on this node as an int32 scalar tensor, read when the op runs."""
    return OPS.tf_ring_topology(which="local_size", name=name)


def process_set_included_op(process_set_id=0, name=None):
    """1 (int32) when this rank belongs to the process set: always, for the
    global set (id 0), the only one in this build; read when the op runs."""
    _check_process_set("process_set_included_op", process_set_id)
    with tf.name_scope(name or "process_set_included"):
        return tf.cast(OPS.tf_ring_topology(which="size") > 0, tf.int32)


def barrier(name=None):
    """Blocks until every rank has called barrier(); in a graph, returns the op to run.

    Unnamed eager barriers share one name and so run one at a time; in a
    graph the node name identifies the barrier on every rank.
    """
    if name:
        tensor_name = _normalize_name(name)
    else:
        tensor_name = "barrier.eager" if tf.executing_eagerly() else ""
    return OPS.tf_ring_barrier(tensor_name=tensor_name)
