"""Allreduce of tf.IndexedSlices (sparse gradients, e.g. from an embedding).

Each rank may touch different rows, so the values and indices of every rank
are gathered rather than summed; repeated indices add up when the slices are
applied or densified. Average divides the gathered values by the size.
"""
import tensorflow as tf

from tf_ring.basics import size
from tf_ring.ops import Average, Sum, allgather


def allreduce_indexed_slices(slices, op=Average, name=None, prescale_factor=1.0,
                             postscale_factor=1.0, compression=None):
    if op not in (Sum, Average):
        raise ValueError(
            "tf_ring.allreduce of tf.IndexedSlices '%s' supports only op=Sum or op=Average; "
            "densify the gradient (tf.convert_to_tensor or sparse_as_dense=True) for other ops."
            % (name or "unnamed"))
    values = slices.values
    factor = prescale_factor * postscale_factor
    if factor != 1.0:
        values = values * tf.cast(factor, values.dtype)
    ctx = None
    if compression is not None:
        values, ctx = compression.compress(values)
    values = allgather(values, name=name and name + ".values")
    indices = allgather(slices.indices, name=name and name + ".indices")
    if compression is not None:
        values = compression.decompress(values, ctx)
    if op == Average:
        if values.dtype.is_floating:
            values = values / tf.cast(size(), values.dtype)
        else:
            values = tf.math.truncatediv(values, tf.cast(size(), values.dtype))
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)
