"""The collectives as TensorFlow ops, usable in eager, tf.function and v1 graphs."""
import re

import tensorflow as tf

from tf_ring._library import OPS

# Reduce ops; values match the engine's wire format.
Sum = 0
Average = 1
Min = 2
Max = 3
Product = 4
_REDUCE_OP_NAMES = {Sum: "Sum", Average: "Average", Min: "Min", Max: "Max", Product: "Product"}

REDUCE_DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.int32, tf.int64)
MOVE_DTYPES = REDUCE_DTYPES + (tf.uint8, tf.int8, tf.bool)


def _normalize_name(name):
    """Node-name-safe version of a user or tensor name."""
    return re.sub(r"[^a-zA-Z0-9_./-]", "_", name)


def _auto_name(prefix, tensor, name):
    """The name that identifies this tensor to every rank.

    In graphs (tf.function, v1) the tensor's own name is stable and identical
    on every rank running the same code. Eagerly there is no such name, so
    unnamed eager collectives share one name per op and run one at a time.
    """
    if name:
        return _normalize_name(name)
    if tf.executing_eagerly():
        return prefix + ".eager"
    return "%s_%s" % (prefix, _normalize_name(tensor.name))


def _check_dtype(what, tensor, allowed, name):
    if tensor.dtype not in allowed:
        raise TypeError(
            "tf_ring.%s of tensor '%s': dtype %s is not supported; supported dtypes are %s. "
            "Cast the tensor (for example with tf.cast) before the collective."
            % (what, name or getattr(tensor, "name", "?"), tensor.dtype.name,
               ", ".join(d.name for d in allowed)))


def _as_tensor(tensor, what, name):
    try:
        return tf.convert_to_tensor(tensor)
    except (TypeError, ValueError) as e:
        raise TypeError("tf_ring.%s of '%s': cannot convert %r to a tensor: %s"
                        % (what, name, type(tensor).__name__, e)) from e


def allreduce(tensor, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
              compression=None, average=None):
    """Reduces `tensor` over all ranks with `op` (Sum, Average, Min, Max, Product).

    prescale_factor multiplies each rank's input before the reduction,
    postscale_factor the result after it. `average=True/False` is accepted for
    old Horovod code and maps to op=Average/Sum.
    """
    if average is not None:
        op = Average if average else Sum
    if op not in _REDUCE_OP_NAMES:
        raise ValueError("tf_ring.allreduce: unknown op %r; use tf_ring.Sum, Average, Min, Max or Product"
                         % (op,))
    if isinstance(tensor, tf.IndexedSlices):
        from tf_ring.sparse import allreduce_indexed_slices
        return allreduce_indexed_slices(tensor, op=op, name=name, prescale_factor=prescale_factor,
                                        postscale_factor=postscale_factor, compression=compression)
    tensor = _as_tensor(tensor, "allreduce", name)
    _check_dtype("allreduce", tensor, REDUCE_DTYPES, name)
    if compression is not None:
        compressed, ctx = compression.compress(tensor)
        reduced = OPS.tf_ring_allreduce(
            compressed, reduce_op=op, prescale_factor=prescale_factor,
            postscale_factor=postscale_factor, tensor_name=_auto_name("allreduce", tensor, name))
        return compression.decompress(reduced, ctx)
    return OPS.tf_ring_allreduce(
        tensor, reduce_op=op, prescale_factor=prescale_factor, postscale_factor=postscale_factor,
        tensor_name=_auto_name("allreduce", tensor, name))


def allgather(tensor, name=None):
    """Concatenates `tensor` from every rank along dimension 0, in rank order.

    The first dimension may differ between ranks; the others must match.
    """
    tensor = _as_tensor(tensor, "allgather", name)
    _check_dtype("allgather", tensor, MOVE_DTYPES, name)
    return OPS.tf_ring_allgather(tensor, tensor_name=_auto_name("allgather", tensor, name))


def broadcast(tensor, root_rank, name=None):
    """Returns root_rank's `tensor` on every rank."""
    tensor = _as_tensor(tensor, "broadcast", name)
    _check_dtype("broadcast", tensor, MOVE_DTYPES, name)
    return OPS.tf_ring_broadcast(tensor, root_rank=int(root_rank),
                                 tensor_name=_auto_name("broadcast", tensor, name))
