"""PowerSGD with tf_ring's collectives: the one call a gradient reducer makes
when its compression is Compression.powersgd(...)."""
import tensorflow as tf

from tf_ring.grouped import grouped_allreduce
from tf_ring.ops import Average, Sum
from tf_ring.process_set import global_process_set, runtime_size
from tf_ring.training.powersgd import PowerSGD


def powersgd_of(compression, what, op=Average):
    """The PowerSGD object when `compression` is one, else None; a clear error
    for PowerSGD's class given uncalled, or an op PowerSGD cannot give."""
    if compression is PowerSGD:
        raise TypeError("%s: compression=Compression.powersgd must be called with its settings, "
                        "e.g. compression=tf_ring.Compression.powersgd(rank=2)" % what)
    if not isinstance(compression, PowerSGD):
        return None
    check_powersgd_op(op, what)
    return compression


def check_powersgd_op(op, what):
    """PowerSGD averages its factors; the result can then be an average or a sum."""
    if op not in (Average, Sum):
        raise ValueError("%s: Compression.powersgd works with op=tf_ring.Average or tf_ring.Sum "
                         "(it averages low-rank factors); got op=%r. Use Average, or "
                         "compression=Compression.none with this op." % (what, op))


def powersgd_reduce(state, grads, variables, op=Average, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set, name=None):
    """`grads` (dense or None, one per variable of `variables`) reduced over
    `process_set` with PowerSGD's `state` (PowerSGD.state, or an optimizer's
    PowerSGDState): what an allreduce with `op` and the scale factors gives,
    with the large kernels approximated. Eagerly the collectives are named
    `name`.powersgd.<stage> (the same on every rank); in a graph they take
    their unique node names."""
    check_powersgd_op(op, "gradient reduction")
    process_set = process_set or global_process_set
    eager = tf.executing_eagerly()
    prefix = (name or "tf_ring") + ".powersgd."

    def allreduce(tensors, stage):
        return grouped_allreduce(tensors, op=op, prescale_factor=prescale_factor,
                                 postscale_factor=postscale_factor,
                                 name=prefix + stage if eager else None, process_set=process_set)

    def average(tensors, stage):
        return grouped_allreduce(tensors, op=Average, name=prefix + stage if eager else None,
                                 process_set=process_set)

    scale = prescale_factor * postscale_factor
    if op == Sum:
        scale = runtime_size(process_set, tf.float32) * scale
    return state.reduce(grads, variables, allreduce, average, scale)
