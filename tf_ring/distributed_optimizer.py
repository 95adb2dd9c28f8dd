"""tf_ring.DistributedOptimizer: one entry point for v1 and Keras optimizers."""
import tensorflow as tf


def DistributedOptimizer(optimizer, *args, **kwargs):  # noqa: N802 (Horovod's name)
    """Wraps `optimizer` so its gradients are averaged over ranks.

    A tf.compat.v1.train.Optimizer gets the graph-mode wrapper
    (tf_ring.training.optimizer_v1.DistributedOptimizerV1, with Horovod's arguments;
    backward_passes_per_step must be 1).
    Anything else is handed, with all arguments, to
    tf_ring.keras.DistributedOptimizer (Keras 3 and tf_keras optimizers).
    """
    if isinstance(optimizer, tf.compat.v1.train.Optimizer):
        from tf_ring.training.optimizer_v1 import DistributedOptimizerV1
        return DistributedOptimizerV1(optimizer, *args, **kwargs)
    try:
        from tf_ring import keras as tf_ring_keras
    except ImportError as e:
        if e.name not in ("tf_ring.keras", "tf_ring"):
            raise
        raise ImportError(
            "tf_ring.DistributedOptimizer got %s, which is not a tf.compat.v1.train.Optimizer, "
            "so it needs tf_ring.keras (the Keras optimizer wrapper), which this installation "
            "lacks. Install a tf_ring that includes tf_ring.keras, or pass a "
            "tf.compat.v1.train optimizer." % type(optimizer).__name__) from e
    return tf_ring_keras.DistributedOptimizer(optimizer, *args, **kwargs)
