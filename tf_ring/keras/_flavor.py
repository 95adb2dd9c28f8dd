"""Which Keras is in play: Keras 3 (`keras`) or legacy Keras 2 (`tf_keras`)."""
import os


def legacy_keras_active():
    """True when tf.keras is tf_keras, which TensorFlow decides from this variable."""
    return os.environ.get("TF_USE_LEGACY_KERAS", "").lower() in ("1", "true")


def is_keras3_optimizer_class(cls):
    import keras
    return issubclass(cls, keras.optimizers.Optimizer)


def is_tf_keras_optimizer_class(cls):
    try:
        import tf_keras
    except ImportError:
        return False
    return issubclass(cls, (tf_keras.optimizers.Optimizer, tf_keras.optimizers.legacy.Optimizer))


def is_tf_keras_legacy_optimizer_class(cls):
    import tf_keras
    return issubclass(cls, tf_keras.optimizers.legacy.Optimizer)


def keras_module():
    """The Keras package that tf.keras resolves to in this process."""
    if legacy_keras_active():
        import tf_keras
        return tf_keras
    import keras
    return keras
