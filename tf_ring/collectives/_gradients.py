"""Gradients of the collectives, registered with Horovod's conventions."""
import tensorflow as tf

from tf_ring.collectives import ops as _ops
from tf_ring.collectives._op_common import REDUCE_OP_NAMES
from tf_ring.runtime.basics import rank
from tf_ring.runtime.process_set import process_set_by_id, runtime_size


def _process_set(op):
    """The process set of a forward op: its gradient runs on the same set."""
    return process_set_by_id(op.get_attr("process_set_id"))


@tf.RegisterGradient("TfRingAllreduce")
def _allreduce_grad(op, grad):
    # Sum and Average are linear and symmetric: the gradient is the same reduction.
    if op.get_attr("reduce_op") == _ops.Adasum:
        raise NotImplementedError("the gradient of an Adasum allreduce is not defined; reduce "
                                  "gradients with Adasum instead of differentiating through it")
    return _ops.allreduce(grad, op=op.get_attr("reduce_op"),
                          prescale_factor=op.get_attr("prescale_factor"),
                          postscale_factor=op.get_attr("postscale_factor"),
                          process_set=_process_set(op))


@tf.RegisterGradient("TfRingAllgather")
def _allgather_grad(op, grad):
    # Average the gradient over ranks, then keep this rank's rows.
    process_set = _process_set(op)
    grad = _ops.allreduce(grad, op=_ops.Average, process_set=process_set)
    x = op.inputs[0]
    rows = tf.shape(x, out_type=tf.int64)[:1]
    all_rows = _ops.allgather(rows, process_set=process_set)
    begin = tf.reduce_sum(all_rows[:process_set.rank()])
    return tf.slice(grad, tf.concat([[begin], tf.zeros([tf.rank(grad) - 1], tf.int64)], 0),
                    tf.shape(x, out_type=tf.int64))


@tf.RegisterGradient("TfRingBroadcast")
def _broadcast_grad(op, grad):
    # Only the root's input influenced the output; it gets the averaged gradient.
    reduced = _ops.allreduce(grad, op=_ops.Average, process_set=_process_set(op))
    if rank() != op.get_attr("root_rank"):
        return reduced * 0
    return reduced


@tf.RegisterGradient("TfRingGroupedAllreduce")
def _grouped_allreduce_grad(op, *grads):
    # Like allreduce, member by member, and again as one group.
    from tf_ring.collectives.grouped import grouped_allreduce
    grads = [tf.zeros_like(x) if g is None else g for g, x in zip(grads, op.inputs)]
    return grouped_allreduce(grads, op=op.get_attr("reduce_op"),
                             prescale_factor=op.get_attr("prescale_factor"),
                             postscale_factor=op.get_attr("postscale_factor"),
                             process_set=_process_set(op))


@tf.RegisterGradient("TfRingAlltoall")
def _alltoall_grad(op, grad, _received_splits_grad):
    # Send every received row's gradient back to the rank it came from.
    from tf_ring.collectives.exchange import alltoall
    returned, _ = alltoall(grad, splits=op.outputs[1], process_set=_process_set(op))
    return [returned, None]


def _reducescatter_grad_factor(op, what, process_set):
    """Horovod's convention, chosen so that allgather(reducescatter(x)) has
    allreduce's gradient: gather every block's gradient; Sum also multiplies
    by the size. The scale factors apply as in the forward pass."""
    reduce_op = op.get_attr("reduce_op")
    if reduce_op not in (_ops.Sum, _ops.Average):
        raise NotImplementedError("the gradient of %s is defined for Sum and Average only, not %s"
                                  % (what, REDUCE_OP_NAMES[reduce_op]))
    factor = op.get_attr("prescale_factor") * op.get_attr("postscale_factor")
    if reduce_op == _ops.Sum:
        # The size when the gradient runs, so a traced step stays right after a shrink.
        factor = factor * runtime_size(process_set, tf.float64)
    return factor


def _scaled(tensor, factor):
    if isinstance(factor, float) and factor == 1.0:
        return tensor
    if tensor.dtype.is_floating:
        return tensor * tf.cast(factor, tensor.dtype)
    return tf.cast(tf.cast(tensor, tf.float64) * tf.cast(factor, tf.float64), tensor.dtype)


def _uneven_rows(x, size):
    """The first dimension of a reducescatter input when it is known and does
    not divide by `size` (the blocks then differ by one row), else None."""
    rows = x.shape[0] if x.shape.rank else None
    return rows if rows is not None and rows % size else None


def _block_rows(rows, size, index):
    # The engine's split rule: the first rows % size ranks get one extra row.
    return rows // size + (1 if index < rows % size else 0)


def _pad_block(grad, rows, process_set):
    """Pads this rank's block to the largest block, so that every rank
    gathers the same first dimension, which allgather under XLA needs. Also
    with no rows missing: every rank's graph keeps the same nodes, so XLA
    compiles its collectives in the same order everywhere."""
    size = process_set.size()
    missing = -(-rows // size) - _block_rows(rows, size, process_set.rank())
    return tf.pad(grad, [[0, missing]] + [[0, 0]] * (grad.shape.rank - 1))


def _unpad_gathered(gathered, rows, size):
    """Drops the padding rows _pad_block added, keeping the rank order."""
    block = -(-rows // size)
    keep = [q * block + i for q in range(size) for i in range(_block_rows(rows, size, q))]
    return tf.gather(gathered, keep)


def _gather_blocks(grads, inputs, process_set, gather):
    """Every rank's block of each gradient, in rank order: the gradient of a
    reducescatter before scaling. Uneven blocks are padded for the gather and
    unpadded after it (same result; it also compiles under XLA)."""
    size = process_set.size()
    rows = [_uneven_rows(x, size) for x in inputs]
    padded = [g if r is None else _pad_block(g, r, process_set) for g, r in zip(grads, rows)]
    gathered = gather(padded)
    return [g if r is None else _unpad_gathered(g, r, size) for g, r in zip(gathered, rows)]


@tf.RegisterGradient("TfRingReducescatter")
def _reducescatter_grad(op, grad):
    process_set = _process_set(op)
    factor = _reducescatter_grad_factor(op, "reducescatter", process_set)
    (gathered,) = _gather_blocks([grad], op.inputs, process_set,
                                 lambda g: [_ops.allgather(g[0], process_set=process_set)])
    return _scaled(gathered, factor)


@tf.RegisterGradient("TfRingGroupedAllgather")
def _grouped_allgather_grad(op, *grads):
    # allgather's gradient member by member, in two grouped collectives: the
    # averaged gradients, then every rank's row counts to find this rank's rows.
    from tf_ring.collectives.grouped import grouped_allgather, grouped_allreduce
    grads = [tf.zeros_like(y) if g is None else g for g, y in zip(grads, op.outputs)]
    process_set = _process_set(op)
    reduced = grouped_allreduce(grads, op=_ops.Average, process_set=process_set)
    rows = tf.stack([tf.shape(x, out_type=tf.int64)[0] for x in op.inputs])
    all_rows = tf.reshape(grouped_allgather([rows], process_set=process_set)[0],
                          [-1, len(op.inputs)])
    begins = tf.reduce_sum(all_rows[:process_set.rank()], axis=0)
    out = []
    for i, (grad, x) in enumerate(zip(reduced, op.inputs)):
        begin = tf.concat([begins[i:i + 1], tf.zeros([tf.rank(grad) - 1], tf.int64)], 0)
        out.append(tf.slice(grad, begin, tf.shape(x, out_type=tf.int64)))
    return out


@tf.RegisterGradient("TfRingGroupedReducescatter")
def _grouped_reducescatter_grad(op, *grads):
    # reducescatter's gradient member by member, gathered as one group.
    from tf_ring.collectives.grouped import grouped_allgather
    process_set = _process_set(op)
    factor = _reducescatter_grad_factor(op, "grouped_reducescatter", process_set)
    grads = [tf.zeros_like(y) if g is None else g for g, y in zip(grads, op.outputs)]
    gathered = _gather_blocks(grads, op.inputs, process_set,
                              lambda g: grouped_allgather(g, process_set=process_set))
    return [_scaled(g, factor) for g in gathered]
