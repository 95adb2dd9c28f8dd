"""Reading and setting an optimizer's learning rate and momentum, in either Keras."""
import numpy as np
import tensorflow as tf


def get_learning_rate(optimizer):
    return float(np.asarray(tf.convert_to_tensor(optimizer.learning_rate)))


def set_learning_rate(optimizer, value):
    # Assigns the existing variable in both Keras flavours, so traced train steps see it.
    optimizer.learning_rate = value


class MomentumCorrection:
    """Keeps momentum consistent when the learning rate jumps from old_lr to new_lr.

    Momentum accumulates lr-scaled steps; after an lr change those old steps are
    the wrong size. Scaling the momentum for the one step by new_lr / old_lr
    fixes that. Legacy tf_keras optimizers keep momentum as a variable we can
    change for one batch and restore. Keras 3 and tf_keras 2.11+ optimizers bake
    momentum into the traced step as a constant, so there the velocity slots
    (`momentums`) are scaled instead, which gives the same next update.
    """

    def __init__(self):
        self._restore = None
        self._scale_fns = {}

    def apply(self, optimizer, ratio):
        if ratio == 1.0:
            return
        hyper = getattr(optimizer, "_hyper", None)
        if isinstance(hyper, dict) and "momentum" in hyper:
            old = float(np.asarray(tf.convert_to_tensor(optimizer.momentum)))
            optimizer.momentum = old * ratio
            self._restore = (optimizer, old)
            return
        slots = [s for s in getattr(optimizer, "momentums", None) or [] if s is not None]
        if slots:
            self._scale(slots, ratio)

    def restore(self):
        if self._restore is not None:
            optimizer, old = self._restore
            optimizer.momentum = old
            self._restore = None

    def _scale(self, slots, ratio):
        key = tuple(id(s) for s in slots)
        if key not in self._scale_fns:
            @tf.function(autograph=False)
            def scale(factor):
                for slot in slots:
                    slot.assign(slot * tf.cast(factor, slot.dtype))
            self._scale_fns[key] = scale
        self._scale_fns[key](tf.constant(ratio, tf.float64))
