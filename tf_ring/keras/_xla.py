"""tf_ring's collectives have no XLA kernels, so XLA must stay off around them."""
import warnings

import tensorflow as tf
from tensorflow.python.ops import control_flow_util

XLA_ERROR = (
    "tf_ring.keras.DistributedOptimizer is being traced inside an XLA-compiled function "
    "(jit_compile=True), but tf_ring's collectives have no XLA kernels. Compile the model with "
    "model.compile(..., jit_compile=False), or pass any tf_ring.keras.callbacks callback to fit(), "
    "which turns XLA off for the train step.")


def tracing_under_xla():
    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def raise_if_tracing_under_xla():
    if tracing_under_xla():
        raise ValueError(XLA_ERROR)


def uses_tf_ring_optimizer(model):
    optimizer = getattr(model, "optimizer", None)
    # Keras 3 may wrap ours in a LossScaleOptimizer.
    inner = getattr(optimizer, "inner_optimizer", None)
    return any(getattr(o, "_tf_ring_settings", None) is not None for o in (optimizer, inner))


def turn_off_jit_for_training(model):
    """Turns XLA off on a model that trains with a tf_ring optimizer, warning once.

    Called from callbacks' set_model, which Keras runs before it builds the
    train function, so the train step is traced without XLA.
    """
    if not getattr(model, "jit_compile", False) or not uses_tf_ring_optimizer(model):
        return
    warnings.warn("tf_ring: turning off XLA (jit_compile) for this model: tf_ring's collectives "
                  "have no XLA kernels.", stacklevel=3)
    model.jit_compile = False
    model.train_function = None
