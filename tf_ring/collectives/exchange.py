"""alltoall and reducescatter: collectives whose result shape depends on all ranks."""
import tensorflow as tf

from tf_ring.runtime._library import OPS
from tf_ring.runtime.process_set import global_process_set, process_set_id_of
from tf_ring.collectives._op_common import (MOVE_DTYPES, REDUCE_DTYPES, Adasum, Average, as_tensor,
                                            auto_name, check_dtype, compressor, resolve_op)


def alltoall(tensor, splits=None, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Sends splits[j] rows of `tensor` to rank j and receives rows from every rank.

    With `splits`, returns (received, received_splits): the received rows
    concatenated in rank order, and an int32 vector of how many rows came
    from each rank. Splits may be uneven or zero. Without `splits`, the first
    dimension must divide by the number of ranks (InvalidArgumentError
    otherwise), every rank gets the same number of rows, and only the received
    tensor is returned, as in Horovod. ignore_name_scope does nothing.
    process_set: exchange among that set's ranks (splits has one entry per member).
    """
    set_id = process_set_id_of(process_set, "alltoall")
    tensor = as_tensor(tensor, "alltoall", name)
    check_dtype("alltoall", tensor, MOVE_DTYPES, name)
    if splits is None:
        received, _ = OPS.tf_ring_alltoall(tensor, tf.zeros([0], tf.int32),
                                           tensor_name=auto_name("alltoall", tensor, name),
                                           process_set_id=set_id, eager=tf.executing_eagerly())
        return received
    splits = tf.reshape(tf.cast(splits, tf.int32), [-1])
    return OPS.tf_ring_alltoall(tensor, splits, tensor_name=auto_name("alltoall", tensor, name),
                                process_set_id=set_id, eager=tf.executing_eagerly())


def reducescatter(tensor, device_dense="", compression=None, op=Average, name=None,
                  ignore_name_scope=False, prescale_factor=1.0, postscale_factor=1.0,
                  process_set=global_process_set):
    """Reduces `tensor` (same shape on every rank) and returns this rank's rows.

    The first dimension is split as evenly as possible; the first
    `rows % size` ranks get one extra row, so it need not divide evenly.
    device_dense and ignore_name_scope are accepted for Horovod code and do
    nothing on this build. process_set: reduce and split among that set's ranks.
    """
    op = resolve_op("reducescatter", op, None)
    set_id = process_set_id_of(process_set, "reducescatter")
    if op == Adasum:
        raise NotImplementedError("tf_ring.reducescatter: Adasum is a reduce op for allreduce "
                                  "only.")
    tensor = as_tensor(tensor, "reducescatter", name)
    check_dtype("reducescatter", tensor, REDUCE_DTYPES, name)
    compression = compressor(compression)
    compressed, ctx = compression.compress(tensor)
    reduced = OPS.tf_ring_reducescatter(
        compressed, reduce_op=op, prescale_factor=prescale_factor,
        postscale_factor=postscale_factor, tensor_name=auto_name("reducescatter", tensor, name),
        process_set_id=set_id, eager=tf.executing_eagerly())
    return compression.decompress(reduced, ctx)
