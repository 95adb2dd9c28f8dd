"""grouped_allreduce: one negotiation (and one fused execution) for a list."""
import tensorflow as tf

from tf_ring._library import OPS
from tf_ring.compression import Compression
from tf_ring.ops import (_REDUCE_OP_NAMES, REDUCE_DTYPES, Average, _as_tensor, _check_dtype,
                         _normalize_name)


def _group_name(name):
    """Explicit names win; eagerly one shared name (calls block, so no clash);
    in graphs an empty name lets the kernel use its unique node name."""
    if name:
        return _normalize_name(name)
    return "grouped_allreduce.eager" if tf.executing_eagerly() else ""


def grouped_allreduce(tensors, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                      compression=Compression.none):
    """Reduces every tensor of `tensors` over all ranks; returns a list in the same order.

    All dense tensors enter the engine together, so they are negotiated in the
    same cycle even in eager mode. tf.IndexedSlices members are reduced through
    allgather (see tf_ring.allreduce). Dtypes may differ within the list.
    """
    if op not in _REDUCE_OP_NAMES:
        raise ValueError("tf_ring.grouped_allreduce: unknown op %r; use tf_ring.Sum, Average, "
                         "Min, Max or Product" % (op,))
    tensors = list(tensors)
    group = _group_name(name)
    results = [None] * len(tensors)
    dense_positions, dense, contexts = [], [], []
    for i, tensor in enumerate(tensors):
        if isinstance(tensor, tf.IndexedSlices):
            from tf_ring.sparse import allreduce_indexed_slices
            results[i] = allreduce_indexed_slices(
                tensor, op=op, name=group and "%s.sparse%d" % (group, i),
                prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                compression=compression)
            continue
        tensor = _as_tensor(tensor, "grouped_allreduce", name)
        _check_dtype("grouped_allreduce", tensor, REDUCE_DTYPES, name)
        compressed, ctx = compression.compress(tensor)
        dense_positions.append(i)
        dense.append(compressed)
        contexts.append(ctx)
    if dense:
        reduced = OPS.tf_ring_grouped_allreduce(
            dense, reduce_op=op, prescale_factor=prescale_factor,
            postscale_factor=postscale_factor, tensor_name=group)
        for i, out, ctx in zip(dense_positions, reduced, contexts):
            results[i] = compression.decompress(out, ctx)
    return results
