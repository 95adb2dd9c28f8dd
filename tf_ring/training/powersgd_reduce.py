"""How today's two gradient reducers (gradient_reduction.py for the tape and
the v1 optimizer, keras/_reduce.py) hand their gradients to PowerSGD.

PowerSGD.reduce_gradients(grads, variables, wire) is the seam of issue 48's
single reducer, which calls it for a compression object that has it. Until
that reducer lands, Wire here stands in for its Wire, and the two reducers
call powersgd_reduce; with it, both go (and the Keras optimizer's reducer
settings take its own PowerSGD copy as their compression).
"""
import tensorflow as tf

from tf_ring.grouped import grouped_allreduce
from tf_ring.ops import Average
from tf_ring.process_set import global_process_set
from tf_ring.training.powersgd import PowerSGD, check_op


def powersgd_of(compression, what, op=Average):
    """The PowerSGD object when `compression` is one, else None; a clear error
    for PowerSGD's class given uncalled, or an op PowerSGD cannot give."""
    if compression is PowerSGD:
        raise TypeError("%s: compression=Compression.powersgd must be called with its settings, "
                        "e.g. compression=tf_ring.Compression.powersgd(rank=2)" % what)
    if not isinstance(compression, PowerSGD):
        return None
    check_op(op, what)
    return compression


class Wire:
    """One reduction's op, scale factors, process set and eager name, and a
    grouped allreduce with them."""

    def __init__(self, op, prescale_factor, postscale_factor, process_set, name):
        self.op, self.process_set, self.name = op, process_set, name
        self.prescale_factor, self.postscale_factor = prescale_factor, postscale_factor

    def allreduce(self, tensors, label="compressed", compression=None):
        name = "%s.%s" % (self.name, label) if tf.executing_eagerly() and self.name else None
        return grouped_allreduce(tensors, op=self.op, compression=compression,
                                 prescale_factor=self.prescale_factor,
                                 postscale_factor=self.postscale_factor, name=name,
                                 process_set=self.process_set)


def powersgd_reduce(powersgd, grads, variables, op=Average, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set, name=None):
    """`grads` (dense or None, one per variable of `variables`) reduced over
    `process_set` with `powersgd`'s state: what an allreduce with `op` and
    the scale factors gives, the large kernels approximated. Eagerly the
    collectives are named `name`.powersgd.<stage> (the same on every rank);
    in a graph they take their unique node names."""
    wire = Wire(op, prescale_factor, postscale_factor, process_set or global_process_set,
                name or "tf_ring")
    return powersgd.reduce_gradients(grads, variables, wire)
