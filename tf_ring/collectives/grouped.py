"""Grouped collectives: one negotiation (and fused execution where the
collective fuses) for a list of tensors."""
import tensorflow as tf

from tf_ring.collectives._eager_names import eager_name
from tf_ring.runtime._library import OPS
from tf_ring.collectives.compression import Compression
from tf_ring.runtime.process_set import global_process_set, process_set_id_of
from tf_ring.collectives._op_common import (MOVE_DTYPES, REDUCE_DTYPES, Adasum, Average, as_tensor,
                                            check_adasum, check_dtype, normalize_name, resolve_op)


def _group_name(name, what="grouped_allreduce"):
    """Explicit names win; eagerly the op and the calling thread (see
    _eager_names); in graphs an empty name lets the kernel use its unique
    node name."""
    if name:
        return normalize_name(name)
    return eager_name(what) if tf.executing_eagerly() else ""


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="",
                      compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, ignore_name_scope=False, name=None,
                      process_set=global_process_set):
    """Reduces every tensor of `tensors` over all ranks; returns a list in the same order.

    All dense tensors enter the engine together, so they are negotiated in the
    same cycle even in eager mode. tf.IndexedSlices members are reduced through
    allgather (see tf_ring.allreduce). Dtypes may differ within the list.
    Horovod's deprecated arguments behave as in tf_ring.allreduce; `name`
    (a tf_ring addition) names the group.
    """
    op = resolve_op("grouped_allreduce", op, average)
    set_id = process_set_id_of(process_set, "grouped_allreduce")
    compression = compression or Compression.none
    tensors = list(tensors)
    group = _group_name(name)
    results = [None] * len(tensors)
    dense_positions, dense, contexts = [], [], []
    for i, tensor in enumerate(tensors):
        if isinstance(tensor, tf.IndexedSlices):
            from tf_ring.collectives.sparse import allreduce_indexed_slices
            results[i] = allreduce_indexed_slices(
                tensor, op=op, name=group and "%s.sparse%d" % (group, i),
                prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                compression=compression, process_set=process_set)
            continue
        tensor = as_tensor(tensor, "grouped_allreduce", name)
        check_dtype("grouped_allreduce", tensor, REDUCE_DTYPES, name)
        if op == Adasum:
            check_adasum("grouped_allreduce", tensor, name)
        compressed, ctx = compression.compress(tensor)
        dense_positions.append(i)
        dense.append(compressed)
        contexts.append(ctx)
    if dense:
        reduced = OPS.tf_ring_grouped_allreduce(
            dense, reduce_op=op, prescale_factor=prescale_factor,
            postscale_factor=postscale_factor, tensor_name=group, process_set_id=set_id,
            eager=tf.executing_eagerly())
        for i, out, ctx in zip(dense_positions, reduced, contexts):
            results[i] = compression.decompress(out, ctx)
    return results


def grouped_allgather(tensors, name=None, ignore_name_scope=False,
                      process_set=global_process_set):
    """Allgathers every tensor of `tensors` (see tf_ring.allgather) in one
    negotiation; returns a list in the same order. ignore_name_scope does nothing."""
    set_id = process_set_id_of(process_set, "grouped_allgather")
    tensors = [as_tensor(t, "grouped_allgather", name) for t in tensors]
    for t in tensors:
        check_dtype("grouped_allgather", t, MOVE_DTYPES, name)
    if not tensors:
        return []
    return list(OPS.tf_ring_grouped_allgather(
        tensors, tensor_name=_group_name(name, "grouped_allgather"), process_set_id=set_id,
        eager=tf.executing_eagerly()))


def grouped_reducescatter(tensors, device_dense="", compression=Compression.none, op=Average,
                          prescale_factor=1.0, postscale_factor=1.0, name=None,
                          process_set=global_process_set):
    """Reducescatters every tensor of `tensors` (see tf_ring.reducescatter) in
    one negotiation; returns a list in the same order. device_dense does
    nothing on this build; `name` (a tf_ring addition) names the group."""
    op = resolve_op("grouped_reducescatter", op, None)
    set_id = process_set_id_of(process_set, "grouped_reducescatter")
    if op == Adasum:
        raise NotImplementedError("tf_ring.grouped_reducescatter: Adasum is a reduce op for "
                                  "allreduce only.")
    compression = compression or Compression.none
    tensors = [as_tensor(t, "grouped_reducescatter", name) for t in tensors]
    compressed, contexts = [], []
    for t in tensors:
        check_dtype("grouped_reducescatter", t, REDUCE_DTYPES, name)
        c, ctx = compression.compress(t)
        compressed.append(c)
        contexts.append(ctx)
    if not tensors:
        return []
    reduced = OPS.tf_ring_grouped_reducescatter(
        compressed, reduce_op=op, prescale_factor=prescale_factor,
        postscale_factor=postscale_factor,
        tensor_name=_group_name(name, "grouped_reducescatter"), process_set_id=set_id,
        eager=tf.executing_eagerly())
    return [compression.decompress(out, ctx) for out, ctx in zip(reduced, contexts)]
