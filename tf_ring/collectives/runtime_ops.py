"""Topology as graph ops, read when they run (Horovod's rank_op and friends),
and barrier(). A v1 graph built before init() gives the right values when it
runs after init()."""
import tensorflow as tf

from tf_ring.collectives._eager_names import eager_name
from tf_ring.runtime._library import OPS
from tf_ring.collectives._op_common import normalize_name
from tf_ring.runtime.process_set import global_process_set, process_set_id_of


def rank_op(name=None):
    """This process's rank as an int32 scalar tensor, read when the op runs."""
    return OPS.tf_ring_topology(which="rank", name=name)


def local_rank_op(name=None):
    """This process's rank on its node as an int32 scalar tensor, read when the op runs."""
    return OPS.tf_ring_topology(which="local_rank", name=name)


def size_op(process_set_id=0, name=None):
    """The number of ranks (of process set `process_set_id`) as an int32
    scalar tensor, read when the op runs."""
    return OPS.tf_ring_topology(which="size", process_set_id=int(process_set_id), name=name)


def local_size_op(name=None):
    """The number of ranks on this node as an int32 scalar tensor, read when the op runs."""
    return OPS.tf_ring_topology(which="local_size", name=name)


def process_set_included_op(process_set_id=0, name=None):
    """1 (int32) when this rank belongs to process set `process_set_id`, else
    0; read when the op runs (InvalidArgumentError for an unknown set)."""
    return OPS.tf_ring_topology(which="process_set_included", process_set_id=int(process_set_id),
                                name=name)


def barrier(name=None, process_set=global_process_set):
    """Blocks until every rank has called barrier(); in a graph, returns the op to run.

    Unnamed eager barriers are named after the calling thread (see
    docs/tensorflow-api.md, Names); in a graph the node name identifies the
    barrier on every rank. process_set: wait for that set's ranks only.
    """
    set_id = process_set_id_of(process_set, "barrier")
    if name:
        tensor_name = normalize_name(name)
    else:
        tensor_name = eager_name("barrier") if tf.executing_eagerly() else ""
    return OPS.tf_ring_barrier(tensor_name=tensor_name, process_set_id=set_id)
