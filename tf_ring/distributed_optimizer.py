"""tf_ring.DistributedOptimizer: one entry point for v1 and Keras optimizers."""
import tensorflow as tf


def DistributedOptimizer(optimizer, *args, **kwargs):  # noqa: N802 (Horovod's name)
    """Wraps `optimizer` so its gradients are averaged over ranks.

    A tf.compat.v1.train.Optimizer gets the graph-mode wrapper
    (tf_ring.optimizer_v1.DistributedOptimizerV1: name, use_locking, op,
    compression, sparse_as_dense, num_groups; device_dense, device_sparse and
    backward_passes_per_step=1 are accepted for Horovod compatibility).
    Anything else is handed, with all arguments, to
    tf_ring.keras.DistributedOptimizer (Keras 3 and tf_keras optimizers).
    """
    if isinstance(optimizer, tf.compat.v1.train.Optimizer):
        from tf_ring.optimizer_v1 import DistributedOptimizerV1
        kwargs.pop("device_dense", None)
        kwargs.pop("device_sparse", None)
        if kwargs.pop("backward_passes_per_step", 1) != 1:
            raise ValueError("tf_ring.DistributedOptimizer for v1 optimizers supports only "
                             "backward_passes_per_step=1.")
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
