"""A tf_ring.keras optimizer's own PowerSGD state (compression=Compression.powersgd(...)).

The state (Q factors, residuals) lives in a copy of the user's PowerSGD
object that the optimizer tracks as a checkpoint dependency, so
tf.train.Checkpoint(optimizer=...) saves it and tf_ring.elastic carries it
(TensorFlowKerasState), while the optimizer's Keras variables, and so the
files model.save writes, stay exactly the user's optimizer's (plain Keras
loads them; a reloaded model's compression starts again from the seeded Q
and zero residuals). The warm-up is counted with the optimizer's
iterations, which model.save keeps: a reloaded model does not warm up again.
"""
import dataclasses

import tensorflow as tf

from tf_ring.training.powersgd import powersgd_of

CHECKPOINT_NAME = "tf_ring_powersgd"


def attach(optimizer):
    """Gives `optimizer` a PowerSGD state of its own when its settings'
    compression is PowerSGD: its reducer compresses with that copy."""
    settings = optimizer._tf_ring_settings
    reducer = settings.reducer
    config = powersgd_of(reducer.settings.compression, "DistributedOptimizer", reducer.settings.op)
    if config is None:
        settings.powersgd = None
        return
    passes = settings.passes

    def reductions_done():
        with tf.init_scope():  # a legacy tf_keras optimizer makes it at first use
            iterations = getattr(optimizer, "_iterations", None)
            if iterations is None:
                iterations = optimizer.iterations
        # tf_ring counts every backward pass in iterations; one reduction per `passes`.
        return tf.cast(tf.convert_to_tensor(iterations), tf.int64) // passes

    settings.powersgd = config.copy(clock=reductions_done)
    reducer.settings = dataclasses.replace(reducer.settings, compression=settings.powersgd)
    optimizer._track_trackable(settings.powersgd, name=CHECKPOINT_NAME, overwrite=True)


def build_state(optimizer, variables):
    """Creates the state of the shared variables among `variables` now
    (outside any tf.cond of the step; elastic sync covers it from then on)."""
    settings = getattr(optimizer, "_tf_ring_settings", None)
    if settings is None or settings.powersgd is None:
        return
    settings.powersgd.build([v for v in variables if not settings.reducer.is_local(v)])

