"""The two pieces of PowerSGD's arithmetic that are not a matmul."""
import tensorflow as tf


def compute_dtype(dtype):
    """PowerSGD computes float64 gradients in float64, all others in float32
    (float16 and bfloat16 factors would lose the small columns)."""
    return tf.float64 if tf.as_dtype(dtype) == tf.float64 else tf.float32


def orthogonalize(p, epsilon=0.0):
    """The columns of `p` (n x r) made orthonormal by modified Gram-Schmidt:
    each column, less its projections on the columns before it, divided by
    its norm (+ epsilon). A column that comes out zero stays zero instead of
    becoming NaN (a layer with a zero gradient). r is small (1 to a few), so
    the loop unrolls into a handful of ops, also under XLA."""
    columns = tf.unstack(p, axis=1)
    done = []
    for column in columns:
        for previous in done:
            column = column - tf.reduce_sum(previous * column) * previous
        norm = tf.norm(column) + tf.cast(epsilon, column.dtype)
        done.append(tf.math.divide_no_nan(column, norm))
    return tf.stack(done, axis=1)
