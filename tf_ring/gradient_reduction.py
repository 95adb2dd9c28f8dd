"""Reducing a list of gradients over ranks: shared by DistributedGradientTape
and the v1 DistributedOptimizer, with Horovod's grouping, predivide and
local-variable options."""
import warnings

import tensorflow as tf

from tf_ring.compression import Compression
from tf_ring.grouped import grouped_allreduce
from tf_ring.ops import Average
from tf_ring.process_set import global_process_set, runtime_size
from tf_ring.training.powersgd_reduce import powersgd_of, powersgd_reduce


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


def _group_by_variables(items, groups, variables):
    """Variables in one inner list of `groups` share a grouped allreduce; any
    other variable's gradient is reduced alone. Order follows `items`, which
    is the same on every rank."""
    membership = {}
    for g, members in enumerate(groups):
        for var in members:
            membership[id(var)] = g
    buckets, order = {}, []
    for i, grad in items:
        key = ("group", membership[id(variables[i])]) if id(variables[i]) in membership else (
            "alone", i)
        if key not in buckets:
            buckets[key] = []
            order.append(key)
        buckets[key].append((i, grad))
    return [buckets[key] for key in order]


def resolve_groups(num_groups, groups):
    """Horovod's rules: num_groups is the deprecated spelling of an integer
    `groups`; `groups` is a positive integer or a list of lists of variables."""
    if num_groups:
        warnings.warn("num_groups is deprecated (as in Horovod); pass groups=%d instead"
                      % num_groups, DeprecationWarning, stacklevel=3)
        if groups is None:
            groups = num_groups
    if groups is not None and not isinstance(groups, (list, tuple)):
        if not isinstance(groups, int) or groups <= 0:
            raise ValueError("groups must be a positive integer or a list of lists of "
                             "variables, got %r" % (groups,))
    return groups


def _scaled(grad, factor):
    """grad times factor, tf.IndexedSlices kept sparse."""
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values * tf.cast(factor, grad.values.dtype), grad.indices,
                                grad.dense_shape)
    return grad * tf.cast(factor, grad.dtype)


def predivide_scales(op, gradient_predivide_factor):
    """(prescale, postscale) that split Average's division around the sum."""
    if gradient_predivide_factor != 1.0 and op == Average:
        return 1.0 / gradient_predivide_factor, float(gradient_predivide_factor)
    return 1.0, 1.0


def allreduce_gradients(grads, op=Average, compression=Compression.none, sparse_as_dense=False,
                        num_groups=0, name=None, groups=None, variables=None,
                        prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Returns `grads` reduced over the ranks of `process_set`, None entries passed through.

    Dense gradients go through grouped_allreduce: `groups` (or num_groups)
    nearly equal groups, groups given as lists of `variables`, or one group.
    tf.IndexedSlices are densified when sparse_as_dense, else reduced through
    allgather of values and indices (the pre/postscale pair, which only splits
    Average's division, is not applied to them: the result is the same).
    On a rank outside `process_set` the gradients stay this rank's own (as
    Horovod's tape and optimizers do), scaled like a reduction over itself:
    a set's optimizer or tape can then run on every rank.
    """
    grads = list(grads)
    if process_set is not global_process_set and not process_set.included():
        scale = prescale_factor * postscale_factor
        return [g if g is None or scale == 1.0 else _scaled(g, scale) for g in grads]
    results = list(grads)
    eager = tf.executing_eagerly()
    powersgd = powersgd_of(compression, "gradient reduction", op)
    dense = []
    for i, grad in enumerate(grads):
        if grad is None:
            continue
        if isinstance(grad, tf.IndexedSlices):
            if not sparse_as_dense:
                results[i] = grouped_allreduce(
                    [grad], op=op, compression=Compression.none if powersgd else compression,
                    name="%s.sparse%d" % (name, i) if eager and name else None,
                    process_set=process_set)[0]
                continue
            grad = tf.convert_to_tensor(grad)
        dense.append((i, grad))
    if powersgd is not None:  # its own two groups, fused as it needs them
        if variables is None:
            raise ValueError("Compression.powersgd keeps state per variable: the gradient "
                             "reduction needs the variables of the gradients")
        reduced = powersgd_reduce(powersgd, [g for _, g in dense],
                                  [variables[i] for i, _ in dense], op, prescale_factor,
                                  postscale_factor, process_set, name)
        for (i, _), out in zip(dense, reduced):
            results[i] = out
        return results
    if groups is None:
        groups = num_groups
    if isinstance(groups, (list, tuple)):
        if variables is None:
            raise ValueError("groups given as lists of variables need the variables of the "
                             "gradients")
        batches = _group_by_variables(dense, groups, list(variables))
    else:
        batches = _split_into_groups(dense, groups or 0)
    for g, group in enumerate(batches):
        reduced = grouped_allreduce([grad for _, grad in group], op=op, compression=compression,
                                    prescale_factor=prescale_factor,
                                    postscale_factor=postscale_factor,
                                    name="%s.group%d" % (name, g) if eager and name else None,
                                    process_set=process_set)
        for (i, _), out in zip(group, reduced):
            results[i] = out
    return results


def scale_local_gradient(grad, process_set=global_process_set):
    """Horovod's scale_local_gradients: a local gradient divided by the
    size (of the process set the others are reduced over)."""
    if grad is None:
        return None
    # The size when this runs: a traced step stays right after a shrink.
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values / runtime_size(process_set, grad.values.dtype),
                                grad.indices, grad.dense_shape)
    return grad / runtime_size(process_set, grad.dtype)


def reduce_except_local(grads, sources, local_keys, scale_local_gradients, **reduce_kwargs):
    """allreduce_gradients for the gradients whose source is not local; local
    ones stay as computed (divided by the size when scale_local_gradients)."""
    grads = list(grads)
    sources = list(sources)
    shared = [i for i, s in enumerate(sources) if variable_key(s) not in local_keys]
    reduced = allreduce_gradients([grads[i] for i in shared],
                                  variables=[sources[i] for i in shared], **reduce_kwargs)
    results = list(grads)
    for i, out in zip(shared, reduced):
        results[i] = out
    if scale_local_gradients and local_keys:
        for i, source in enumerate(sources):
            if variable_key(source) in local_keys:
                results[i] = scale_local_gradient(
                    grads[i], reduce_kwargs.get("process_set", global_process_set))
    return results


def variable_key(var):
    """Identity of a variable (tf.Variable or Keras variable) for local-variable sets."""
    return id(var)
