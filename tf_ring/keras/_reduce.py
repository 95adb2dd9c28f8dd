"""Allreduce of a list of gradients, issued together so the engine can fuse them."""
import tensorflow as tf

from tf_ring import ops
from tf_ring.gradient_reduction import variable_key
from tf_ring.grouped import grouped_allreduce
from tf_ring.keras import _xla
from tf_ring.process_set import global_process_set, runtime_size
from tf_ring.training.powersgd_reduce import powersgd_of, powersgd_reduce


def to_dense(grad):
    """IndexedSlices (e.g. from an Embedding) become dense tensors before the allreduce."""
    if isinstance(grad, tf.IndexedSlices):
        return tf.convert_to_tensor(grad)
    return grad


def allreduce_gradients(grads, variables, op, compression, prescale_factor=1.0, postscale_factor=1.0,
                        name_prefix="", process_set=None):
    """Reduces every non-None gradient over ranks; None stays None.

    In a graph each collective is named after its gradient tensor, which is
    unique in the graph and identical on every rank. Eagerly (run_eagerly=True)
    there is no such name, so each gets one from its position and variable.
    On a rank outside `process_set` each gradient stays this rank's own,
    scaled like a reduction over itself (as Horovod's optimizer does).
    """
    if (process_set is not None and process_set is not global_process_set
            and not process_set.included()):
        scale = prescale_factor * postscale_factor
        return [None if g is None else to_dense(g) if scale == 1.0
                else to_dense(g) * tf.cast(scale, g.dtype) for g in grads]
    powersgd = powersgd_of(compression, "DistributedOptimizer", op)
    if powersgd is not None:  # its own two grouped allreduces
        return powersgd_reduce(powersgd, [None if g is None else to_dense(g) for g in grads],
                               variables, op, prescale_factor, postscale_factor,
                               process_set or global_process_set,
                               name="tf_ring.keras.%sgrad" % name_prefix)
    if _xla.tracing_under_xla():
        return _grouped_under_xla(grads, op, compression, prescale_factor, postscale_factor,
                                  process_set)
    eager = tf.executing_eagerly()
    reduced = []
    for index, (grad, var) in enumerate(zip(grads, variables)):
        if grad is None:
            reduced.append(None)
            continue
        name = None
        if eager:
            name = "tf_ring.keras.%sgrad.%d.%s" % (name_prefix, index, _variable_label(var))
        reduced.append(ops.allreduce(to_dense(grad), op=op, name=name, compression=compression,
                                     prescale_factor=prescale_factor,
                                     postscale_factor=postscale_factor, process_set=process_set))
    return reduced


def _grouped_under_xla(grads, op, compression, prescale_factor, postscale_factor, process_set):
    """Inside an XLA-compiled step each collective is one blocking custom call,
    run in XLA's schedule order: separate allreduces would negotiate one at a
    time and never fuse. One grouped allreduce negotiates them together."""
    positions = [i for i, g in enumerate(grads) if g is not None]
    results = [None] * len(grads)
    if not positions:
        return results
    reduced = grouped_allreduce([to_dense(grads[i]) for i in positions], op=op,
                                compression=compression, prescale_factor=prescale_factor,
                                postscale_factor=postscale_factor,
                                process_set=process_set or global_process_set)
    for i, out in zip(positions, reduced):
        results[i] = out
    return results


def reduce_gradients(settings, grads, variables, postscale_factor=1.0):
    """Reduces the gradients of shared variables with the optimizer's settings;
    local variables keep theirs (scaled like the rest, and divided by the
    set's size when scale_local_gradients)."""
    shared = [i for i, v in enumerate(variables) if variable_key(v) not in settings.local_keys]
    compression = settings.compression if settings.powersgd is None else settings.powersgd
    reduced = allreduce_gradients([grads[i] for i in shared], [variables[i] for i in shared],
                                  settings.op, compression,
                                  prescale_factor=settings.prescale,
                                  postscale_factor=postscale_factor * settings.postscale,
                                  process_set=settings.process_set)
    results = [None if g is None else _scale_local(g, postscale_factor, settings) for g in grads]
    for i, out in zip(shared, reduced):
        results[i] = out
    return results


def _scale_local(grad, postscale_factor, settings):
    """A local variable's gradient times postscale_factor, divided by the
    set's size when scale_local_gradients (the size when the step runs, so
    a traced step stays right after an in-process shrink)."""
    if settings.scale_local_gradients:
        grad = to_dense(grad) / runtime_size(settings.process_set, grad.dtype)
    return grad if postscale_factor == 1.0 else to_dense(grad) * postscale_factor


def _variable_label(var):
    return getattr(var, "path", None) or getattr(var, "name", "var")
