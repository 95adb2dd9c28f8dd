"""alltoall and reducescatter: collectives whose result shape depends on all ranks."""
import tensorflow as tf

from tf_ring._library import OPS
from tf_ring.ops import (_REDUCE_OP_NAMES, MOVE_DTYPES, REDUCE_DTYPES, Average, _as_tensor,
                         _auto_name, _check_dtype)


def alltoall(tensor, splits=None, name=None):
    """Sends splits[j] rows of `tensor` to rank j and receives rows from every rank.

    Returns (received, received_splits): the received rows concatenated in
    rank order, and an int32 vector of how many rows came from each rank.
    splits=None splits the first dimension as evenly as possible (the first
    `rows % size` ranks get one extra row). Splits may be uneven or zero.
    """
    tensor = _as_tensor(tensor, "alltoall", name)
    _check_dtype("alltoall", tensor, MOVE_DTYPES, name)
    if splits is None:
        splits = tf.zeros([0], tf.int32)
    else:
        splits = tf.reshape(tf.cast(splits, tf.int32), [-1])
    return OPS.tf_ring_alltoall(tensor, splits, tensor_name=_auto_name("alltoall", tensor, name))


def reducescatter(tensor, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0):
    """Reduces `tensor` (same shape on every rank) and returns this rank's rows.

    The first dimension is split as evenly as possible; the first
    `rows % size` ranks get one extra row, so it need not divide evenly.
    """
    if op not in _REDUCE_OP_NAMES:
        raise ValueError("tf_ring.reducescatter: unknown op %r; use tf_ring.Sum, Average, Min, "
                         "Max or Product" % (op,))
    tensor = _as_tensor(tensor, "reducescatter", name)
    _check_dtype("reducescatter", tensor, REDUCE_DTYPES, name)
    return OPS.tf_ring_reducescatter(
        tensor, reduce_op=op, prescale_factor=prescale_factor, postscale_factor=postscale_factor,
        tensor_name=_auto_name("reducescatter", tensor, name))
