"""allgather as a TensorFlow op. Its own module because both the public ops
and the IndexedSlices allreduce (sparse.py) build on it."""
import tensorflow as tf

from tf_ring.runtime._library import OPS
from tf_ring.collectives._op_common import MOVE_DTYPES, as_tensor, auto_name, check_dtype
from tf_ring.runtime.process_set import global_process_set, process_set_id_of


def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Concatenates `tensor` from every rank along dimension 0, in rank order.

    The first dimension may differ between ranks; the others must match.
    ignore_name_scope is accepted for Horovod code and does nothing.
    process_set: gather from that set's ranks only, in their rank order.
    """
    set_id = process_set_id_of(process_set, "allgather")
    tensor = as_tensor(tensor, "allgather", name)
    check_dtype("allgather", tensor, MOVE_DTYPES, name)
    return OPS.tf_ring_allgather(tensor, tensor_name=auto_name("allgather", tensor, name),
                                 process_set_id=set_id, eager=tf.executing_eagerly())
