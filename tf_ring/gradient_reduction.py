"""Averaging a list of gradients over ranks: shared by DistributedGradientTape
and the v1 DistributedOptimizer."""
import tensorflow as tf

from tf_ring.compression import Compression
from tf_ring.grouped import grouped_allreduce
from tf_ring.ops import Average


def _split_into_groups(items, num_groups):
    """num_groups contiguous, nearly equal groups (one group when num_groups <= 0)."""
    if num_groups <= 0 or num_groups >= len(items):
        return [items] if num_groups <= 0 else [[item] for item in items]
    base, extra = divmod(len(items), num_groups)
    groups, start = [], 0
    for g in range(num_groups):
        end = start + base + (1 if g < extra else 0)
        groups.append(items[start:end])
        start = end
    return groups


def allreduce_gradients(grads, op=Average, compression=Compression.none, sparse_as_dense=False,
                        num_groups=0, name=None):
    """Returns `grads` reduced over ranks, None entries passed through.

    Dense gradients go through grouped_allreduce (num_groups groups, or one).
    tf.IndexedSlices are densified when sparse_as_dense, else reduced through
    allgather of values and indices.
    """
    grads = list(grads)
    results = list(grads)
    eager = tf.executing_eagerly()
    dense = []
    for i, grad in enumerate(grads):
        if grad is None:
            continue
        if isinstance(grad, tf.IndexedSlices):
            if not sparse_as_dense:
                results[i] = grouped_allreduce(
                    [grad], op=op, compression=compression,
                    name="%s.sparse%d" % (name, i) if eager and name else None)[0]
                continue
            grad = tf.convert_to_tensor(grad)
        dense.append((i, grad))
    for g, group in enumerate(_split_into_groups(dense, num_groups)):
        reduced = grouped_allreduce([grad for _, grad in group], op=op, compression=compression,
                                    name="%s.group%d" % (name, g) if eager and name else None)
        for (i, _), out in zip(group, reduced):
            results[i] = out
    return results
