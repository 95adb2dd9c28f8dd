"""The one gradient reducer: DistributedGradientTape, the v1
DistributedOptimizer and tf_ring.keras.DistributedOptimizer all reduce their
gradients here, with their GradientSettings (gradient_settings.py).

What it does, in order: densify tf.IndexedSlices when sparse_as_dense; keep
local variables' gradients local (divided by the set's size when
scale_local_gradients); on a rank outside the process set, keep the other
gradients this rank's own too, scaled like a reduction over itself (so a
set's tape or optimizer may run on every rank, as in Horovod); else reduce
them, sparse ones through allgather, dense ones as the settings' batching
says.

A stateful compressor with per-variable state (PowerSGD: issue 50) plugs in
through the compression object: one with a `reduce_gradients(grads,
variables, wire)` method takes over the dense gradients of the shared
variables, sees each with its variable, and sends what it chooses through
`wire` (a Wire: the reduction's op, scales, process set and name, and
`wire.allreduce(tensors)`); it returns the reduced gradients. Compressors
without it (Compression.none, fp16) only compress and decompress around the
reducer's own allreduce.
"""
import tensorflow as tf
from tensorflow.python.ops import control_flow_util

from tf_ring.collectives import ops
from tf_ring.collectives.grouped import grouped_allreduce
from tf_ring.runtime.process_set import global_process_set, runtime_size
from tf_ring.training.gradient_settings import PER_GRADIENT


def variable_key(var):
    """Identity of a variable (tf.Variable or Keras variable) for local-variable sets."""
    return id(var)


def tracing_under_xla():
    """Whether the graph being built is compiled by XLA (jit_compile=True)."""
    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def to_dense(grad):
    """tf.IndexedSlices (e.g. from an Embedding) as a dense tensor; others as they are."""
    return tf.convert_to_tensor(grad) if isinstance(grad, tf.IndexedSlices) else grad


def kept_as_the_optimizer_gets_them(grads, summed_over_passes):
    """The gradients a wrapped optimizer reduces: tf.IndexedSlices stay sparse,
    so the user's optimizer applies them as it would without tf_ring (Keras's
    Adam, for one, squares each sparse row before adding repeats, which a
    dense gradient cannot reproduce). Densified only where tf_ring must hold
    them dense: summed over backward passes (the sums are dense variables),
    or inside XLA, where allgather needs the same row count on every rank
    and a final, smaller batch would break the compiled step."""
    if summed_over_passes or tracing_under_xla():
        return [None if g is None else to_dense(g) for g in grads]
    return list(grads)


class GradientReducer:
    """Reduces lists of gradients with one GradientSettings; `name` names
    the collectives that eager mode cannot name from the graph."""

    def __init__(self, settings, name):
        self.settings, self.name = settings, name
        self.local_keys = set()

    def register_local(self, var):
        """Keeps `var`'s gradient local: it is not reduced over ranks."""
        self.local_keys.add(variable_key(var))

    def is_local(self, var):
        return variable_key(var) in self.local_keys

    def reduce(self, grads, variables, scale=1.0):
        """`grads` reduced over the process set, in order, None passed through.
        `variables`: each gradient's variable. `scale` multiplies every
        result (Keras's averaged aggregation of several backward passes)."""
        s = self.settings
        grads = [to_dense(g) if s.sparse_as_dense else g for g in grads]
        variables = list(variables)
        results = [None] * len(grads)
        shared = []
        for i, (grad, var) in enumerate(zip(grads, variables)):
            if grad is None:
                continue
            if self.is_local(var):
                results[i] = self._local(grad, scale)
            else:
                shared.append(i)
        reduced = self._shared([grads[i] for i in shared], [variables[i] for i in shared], scale)
        for i, out in zip(shared, reduced):
            results[i] = out
        return results

    def _local(self, grad, scale):
        """A local variable's gradient: this rank's own, divided by the set's
        size when scale_local_gradients (the size when the step runs, so a
        traced step stays right after an in-process shrink)."""
        if self.settings.scale_local_gradients:
            grad = _divided(grad, runtime_size(self.settings.process_set, _dtype(grad)))
        return grad if scale == 1.0 else _scaled(grad, scale)

    def _shared(self, grads, variables, scale):
        s = self.settings
        if s.process_set is not global_process_set and not s.process_set.included():
            own = s.prescale * s.postscale * scale
            return [g if own == 1.0 else _scaled(g, own) for g in grads]
        results = [None] * len(grads)
        dense = []
        for i, grad in enumerate(grads):
            if isinstance(grad, tf.IndexedSlices):
                # Through allgather; Average's pre/postscale pair only splits
                # its division, so the result is the same without it.
                results[i] = self._sparse(grad, i, scale)
            else:
                dense.append(i)
        takeover = getattr(s.compression, "reduce_gradients", None)
        dense_grads, dense_vars = [grads[i] for i in dense], [variables[i] for i in dense]
        if takeover is not None:
            reduced = takeover(dense_grads, dense_vars,
                               Wire(s.op, s.prescale, s.postscale * scale, s.process_set, self.name))
        elif s.batching == PER_GRADIENT and not tracing_under_xla():
            reduced = self._one_by_one(dense_grads, dense_vars, scale)
        else:
            reduced = self._in_groups(dense_grads, dense_vars, scale)
        for i, out in zip(dense, reduced):
            results[i] = out
        return results

    def _sparse(self, grad, index, scale):
        s = self.settings
        name = "%s.sparse%d" % (self.name, index) if tf.executing_eagerly() and self.name else None
        # A compressor that takes over (PowerSGD) sees dense gradients only.
        compression = None if hasattr(s.compression, "reduce_gradients") else s.compression
        out = grouped_allreduce([grad], op=s.op, compression=compression, name=name,
                                process_set=s.process_set)[0]
        return out if scale == 1.0 else _scaled(out, scale)

    def _one_by_one(self, grads, variables, scale):
        s = self.settings
        eager = tf.executing_eagerly() and self.name
        return [ops.allreduce(grad, op=s.op, compression=s.compression,
                              prescale_factor=s.prescale, postscale_factor=s.postscale * scale,
                              process_set=s.process_set,
                              name="%s.grad.%d.%s" % (self.name, i, _label(var)) if eager else None)
                for i, (grad, var) in enumerate(zip(grads, variables))]

    def _in_groups(self, grads, variables, scale):
        groups = self.settings.groups
        if self.settings.batching == PER_GRADIENT:
            groups = None  # under XLA: all in one
        indexed = list(enumerate(grads))
        if isinstance(groups, (list, tuple)):
            batches = _group_by_variables(indexed, groups, variables)
        else:
            batches = _split_into_groups(indexed, groups or 0)
        results = [None] * len(grads)
        for g, batch in enumerate(batches):
            reduced = self._grouped([grad for _, grad in batch], self.settings.postscale * scale,
                                    "group%d" % g, self.settings.compression)
            for (i, _), out in zip(batch, reduced):
                results[i] = out
        return results

    def _grouped(self, tensors, postscale, label, compression):
        s = self.settings
        return Wire(s.op, s.prescale, postscale, s.process_set, self.name).allreduce(
            tensors, label, compression)


class Wire:
    """One reduction's parameters as a compressor that takes over sees them:
    reduce op, prescale and postscale factors, process set, and the name its
    eager collectives start with."""

    def __init__(self, op, prescale_factor, postscale_factor, process_set, name):
        self.op, self.process_set, self.name = op, process_set, name
        self.prescale_factor, self.postscale_factor = prescale_factor, postscale_factor

    def allreduce(self, tensors, label="compressed", compression=None):
        """`tensors` reduced together (one grouped allreduce) with these parameters."""
        name = "%s.%s" % (self.name, label) if tf.executing_eagerly() and self.name else None
        return grouped_allreduce(tensors, op=self.op, compression=compression,
                                 prescale_factor=self.prescale_factor,
                                 postscale_factor=self.postscale_factor, name=name,
                                 process_set=self.process_set)


def _split_into_groups(items, num_groups):
    """num_groups contiguous, nearly equal groups (one group when num_groups <= 0)."""
    if not items:
        return []
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


def _scaled(grad, factor):
    """grad times factor, tf.IndexedSlices kept sparse."""
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values * tf.cast(factor, grad.values.dtype), grad.indices,
                                grad.dense_shape)
    return grad * tf.cast(factor, grad.dtype)


def _divided(grad, divisor):
    """grad divided by `divisor` (a tensor of its dtype), tf.IndexedSlices kept sparse."""
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values / divisor, grad.indices, grad.dense_shape)
    return grad / divisor


def _dtype(grad):
    return grad.values.dtype if isinstance(grad, tf.IndexedSlices) else grad.dtype


def _label(var):
    return getattr(var, "path", None) or getattr(var, "name", "var")
