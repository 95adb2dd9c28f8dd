"""XLA and tf_ring.keras: a train step with a tf_ring optimizer compiles with
XLA (jit_compile=True) when this build lowers tf_ring's collectives
(cc/xla_ops/, `tf_ring._xla_support`). What the optimizer path traces there:
dense allreduces (IndexedSlices gradients are densified first, so no
allgather), one grouped allreduce of the gradients, the loss-scale check's
Min allreduce and casts for compression; all of them lower. Builds without
the lowering keep XLA off for the train step, with a warning.
"""
import warnings

from tf_ring.runtime._build_info import xla_support
from tf_ring.training.gradient_reduction import tracing_under_xla

NO_LOWERING = ("this build of tf_ring has no XLA lowering for its collectives "
               "(tf_ring._xla_support is False: the TensorFlow wheel it was built against "
               "lacks XLA's FFI headers)")


def lowering_built():
    return xla_support()


def why_not_compilable(settings):
    """Why a train step with these optimizer settings cannot compile with XLA,
    or None when it can."""
    if getattr(settings, "sharded", None) is not None:
        return ("shard_state=True has no XLA path yet (its step slices and reassembles "
                "variables outside what this build compiles; docs/sharded-state.md)")
    # every other option of DistributedOptimizer lowers (see the module docstring)
    if not lowering_built():
        return NO_LOWERING
    return None


def raise_if_not_compilable(settings):
    """Called while the optimizer's step is traced: a clear error instead of
    XLA's "unsupported operations" when that step cannot compile."""
    if not tracing_under_xla():
        return
    reason = why_not_compilable(settings)
    if reason is not None:
        raise ValueError(
            "tf_ring.keras.DistributedOptimizer is being traced inside an XLA-compiled function "
            "(jit_compile=True), but %s. Compile the model with model.compile(..., "
            "jit_compile=False), or pass any tf_ring.keras.callbacks callback to fit(), which "
            "then turns XLA off for the train step." % reason)


def _tf_ring_settings(model):
    optimizer = getattr(model, "optimizer", None)
    # Keras 3 may wrap ours in a LossScaleOptimizer.
    inner = getattr(optimizer, "inner_optimizer", None)
    for candidate in (optimizer, inner):
        settings = getattr(candidate, "_tf_ring_settings", None)
        if settings is not None:
            return settings
    return None


def keep_jit_only_if_compilable(model):
    """Turns XLA off, warning, on a model whose train step with a tf_ring
    optimizer cannot compile; leaves every other model as it is.

    Called from callbacks' set_model, which Keras runs before it builds the
    train function, so the train step is then traced without XLA.
    """
    if not getattr(model, "jit_compile", False):
        return
    settings = _tf_ring_settings(model)
    if settings is None:
        return
    reason = why_not_compilable(settings)
    if reason is None:
        return
    warnings.warn("tf_ring: turning off XLA (jit_compile) for this model: %s." % reason,
                  stacklevel=3)
    model.jit_compile = False
    model.train_function = None
