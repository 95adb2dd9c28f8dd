"""Allreduce of tf.IndexedSlices (sparse gradients, e.g. from an embedding).

Each rank may touch different rows, so the values and indices of every rank
are gathered rather than summed; repeated indices add up when the slices are
applied or densified. Average divides the gathered values by the size, with
TensorFlow's true division as in Horovod: integer values give a float result.
"""
import tensorflow as tf

from tf_ring.collectives._allgather_op import allgather
from tf_ring.collectives._op_common import REDUCE_OP_NAMES, Average, Sum
from tf_ring.runtime.process_set import runtime_size


def allreduce_indexed_slices(slices, op=Average, name=None, prescale_factor=1.0,
                             postscale_factor=1.0, compression=None, process_set=None):
    what = "tf_ring.allreduce of tf.IndexedSlices '%s'" % (name or "unnamed")
    if op not in (Sum, Average):
        raise NotImplementedError(
            "%s supports only op=Sum or op=Average, not %s; densify the gradient "
            "(tf.convert_to_tensor, or sparse_as_dense=True) for other ops."
            % (what, REDUCE_OP_NAMES.get(op, op)))
    if prescale_factor != 1.0 or postscale_factor != 1.0:
        raise NotImplementedError(
            "%s does not support prescale_factor or postscale_factor; scale the values "
            "before the allreduce or densify the gradient." % what)
    values = slices.values
    ctx = None
    if compression is not None:
        values, ctx = compression.compress(values)
    values = allgather(values, name=name and name + ".values", process_set=process_set)
    indices = allgather(slices.indices, name=name and name + ".indices", process_set=process_set)
    if compression is not None:
        values = compression.decompress(values, ctx)
    if op == Average:
        # The size when this runs: a traced step stays right after a shrink.
        values = values / runtime_size(process_set, values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)
