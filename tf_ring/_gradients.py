"""Gradients of the collectives, registered with Horovod's conventions."""
import tensorflow as tf

from tf_ring import ops as _ops
from tf_ring.basics import rank


@tf.RegisterGradient("TfRingAllreduce")
def _allreduce_grad(op, grad):
    # Sum and Average are linear and symmetric: the gradient is the same reduction.
    return _ops.allreduce(grad, op=op.get_attr("reduce_op"),
                          prescale_factor=op.get_attr("prescale_factor"),
                          postscale_factor=op.get_attr("postscale_factor"))


@tf.RegisterGradient("TfRingAllgather")
def _allgather_grad(op, grad):
    # Average the gradient over ranks, then keep this rank's rows.
    grad = _ops.allreduce(grad, op=_ops.Average)
    x = op.inputs[0]
    rows = tf.shape(x, out_type=tf.int64)[:1]
    all_rows = _ops.allgather(rows)
    begin = tf.reduce_sum(all_rows[:rank()])
    return tf.slice(grad, tf.concat([[begin], tf.zeros([tf.rank(grad) - 1], tf.int64)], 0),
                    tf.shape(x, out_type=tf.int64))


@tf.RegisterGradient("TfRingBroadcast")
def _broadcast_grad(op, grad):
    # Only the root's input influenced the output; it gets the averaged gradient.
    reduced = _ops.allreduce(grad, op=_ops.Average)
    if rank() != op.get_attr("root_rank"):
        return reduced * 0
    return reduced
