"""Mixed precision: a loss-scale optimizer around a tf_ring optimizer must find
"all gradients finite" true or false on every rank alike.

Keras's LossScaleOptimizer (which model.compile wraps around the optimizer
under the mixed_float16 policy) looks at the gradients it is given and runs
the inner optimizer's step, where our allreduces are, only when they are all
finite. Judged on each rank's own gradients, a rank whose float16 gradients
overflowed would skip the allreduces its peers wait in. So the gradients are
reduced before the check, and the inner step applies them as they are:

- tf_keras's loss-scale optimizers aggregate through the inner optimizer's
  aggregate_gradients (_aggregate_gradients for legacy optimizers) before
  their check, a hook meant for this; tf_ring's optimizer reduces there.
- Keras 3's LossScaleOptimizer has no such hook, so tf_ring wraps its apply()
  (install_keras3_hook) for loss-scale optimizers around a tf_ring optimizer.

Where gradients stay this rank's own (variables registered as local, or
backward_passes_per_step > 1, whose reduction waits for the last pass), one
allreduce (Min) of a "finite here" flag makes every rank's gradients
non-finite when any rank's are, so every rank skips the step together.
"""
import functools

import numpy as np
import tensorflow as tf

from tf_ring.collectives import ops
from tf_ring.keras import _xla
from tf_ring.keras._sharded_state import refuse_loss_scaling
from tf_ring.runtime.process_set import global_process_set
from tf_ring.training.gradient_reduction import kept_as_the_optimizer_gets_them


def gradients_for_check(optimizer, grads, variables):
    """Returns (grads, reduced): gradients that are finite on every rank or on
    none; `reduced` is True when they are already reduced, so the inner step
    must apply them as they are (False: it reduces them itself)."""
    settings = optimizer._tf_ring_settings
    grads = kept_as_the_optimizer_gets_them(grads, settings.accumulator is not None)
    if settings.accumulator is None:
        grads = settings.reducer.reduce(grads, variables)
        own = [g for g, v in zip(grads, variables)
               if g is not None and settings.reducer.is_local(v)]
        reduced = True
    else:
        own = [g for g in grads if g is not None]
        reduced = False
    process_set = settings.reducer.settings.process_set
    if own and (process_set is global_process_set or process_set.included()):
        grads = _non_finite_everywhere_if_anywhere(grads, own, process_set)
    return grads, reduced


def _non_finite_everywhere_if_anywhere(grads, own, process_set):
    finite_here = tf.reduce_all([tf.reduce_all(tf.math.is_finite(_values(g))) for g in own])
    # Issued on every rank, every step, outside any branch.
    finite_everywhere = ops.allreduce(tf.cast(finite_here, tf.int32), op=ops.Min,
                                      name="tf_ring.keras.loss_scale.all_finite",
                                      process_set=process_set) > 0

    def poisoned(g):
        values = _values(g)
        values = values + tf.where(finite_everywhere, tf.zeros([], values.dtype),
                                   tf.constant(np.nan, values.dtype))
        if isinstance(g, tf.IndexedSlices):
            return tf.IndexedSlices(values, g.indices, g.dense_shape)
        return values

    return [None if g is None else poisoned(g) for g in grads]


def _values(grad):
    """The numbers of a gradient: an IndexedSlices' values, or the tensor."""
    return grad.values if isinstance(grad, tf.IndexedSlices) else grad


class PreReduced:
    """The gradients a loss-scale optimizer got from the inner optimizer's
    aggregation hook (tf_keras), so the inner apply_gradients that receives
    exactly these tensors does not reduce them a second time."""

    def __init__(self):
        self._grads = None

    def remember(self, grads):
        self._grads = list(grads)

    def take(self, grads):
        remembered, self._grads = self._grads, None
        return (remembered is not None and len(remembered) == len(grads)
                and all(a is b for a, b in zip(remembered, grads)))


def tf_keras_aggregate(optimizer, base_method, grads_and_vars):
    """The tf_keras aggregation hook: a pass-through when our own apply_gradients
    calls it (its gradients are reduced by then); otherwise a loss-scale
    optimizer (or user code) is about to judge these gradients, so reduce first."""
    settings = optimizer._tf_ring_settings
    if settings.applying:
        return base_method(optimizer, grads_and_vars)
    _xla.raise_if_not_compilable(settings)
    pairs = list(grads_and_vars)
    variables = [v for _, v in pairs]
    grads, reduced = gradients_for_check(optimizer, [g for g, _ in pairs], variables)
    if reduced:
        settings.pre_reduced.remember(grads)
    return list(zip(grads, variables))


def _reduce_unscaled_for_powersgd(loss_scale_optimizer, inner, grads, variables):
    """gradients_for_check, with PowerSGD's state kept in the gradients' own
    units: its residual (what earlier steps' approximations missed) is added
    to later gradients, so it must not carry the loss scale of the step that
    stored it (after the scale halves it would count double). The scale is a
    power of two: dividing and multiplying by it is exact in float32."""
    settings = inner._tf_ring_settings
    if settings.powersgd is None or settings.accumulator is not None:
        return gradients_for_check(inner, grads, variables)
    if not loss_scale_optimizer.built:  # its apply() would build it, after our reduction
        loss_scale_optimizer.build(variables)
    scale = tf.convert_to_tensor(loss_scale_optimizer.dynamic_scale)

    def times(g, factor):
        if g is None:
            return None
        if isinstance(g, tf.IndexedSlices):
            return tf.IndexedSlices(times(g.values, factor), g.indices, g.dense_shape)
        return g * tf.cast(factor, g.dtype)

    grads, reduced = gradients_for_check(inner, [times(g, 1.0 / scale) for g in grads], variables)
    return [times(g, scale) for g in grads], reduced


def install_keras3_hook():
    """Makes Keras 3's LossScaleOptimizer reduce a tf_ring inner optimizer's
    gradients before its finiteness check; other inner optimizers are untouched."""
    from keras.optimizers import LossScaleOptimizer

    original = LossScaleOptimizer.apply
    if getattr(original, "_tf_ring_hook", False):
        return

    @functools.wraps(original)
    def apply(self, grads, trainable_variables=None):
        inner = self.inner_optimizer
        settings = getattr(inner, "_tf_ring_settings", None)
        if settings is not None and settings.sharded is not None:
            refuse_loss_scaling()
        if settings is None or (trainable_variables is None and not self.built):
            return original(self, grads, trainable_variables)
        _xla.raise_if_not_compilable(settings)
        variables = list(trainable_variables if trainable_variables is not None
                         else self._trainable_variables)
        grads, reduced = _reduce_unscaled_for_powersgd(self, inner, list(grads), variables)
        settings.reduced_by_caller = reduced
        try:
            return original(self, grads, trainable_variables)
        finally:
            settings.reduced_by_caller = False

    apply._tf_ring_hook = True
    LossScaleOptimizer.apply = apply
