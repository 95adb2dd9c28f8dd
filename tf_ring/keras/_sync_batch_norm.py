"""SyncBatchNormalization: batch statistics over the global batch of all ranks.

In training, each rank's sum, sum of squares and row count per channel go
through one Sum allreduce, so the mean and variance are those of the
concatenated batch even when ranks hold different numbers of rows. Inference
uses the moving statistics, which every rank updates with the same global
values. The allreduce's gradient (a Sum allreduce of the gradients) carries
the cross-rank terms of the backward pass.
"""
import tensorflow as tf

from tf_ring.collectives import ops
from tf_ring.keras import _flavor

_BatchNormalization = _flavor.keras_module().layers.BatchNormalization


def cross_rank_moments(inputs, axes, keepdims, weights=None, name=None):
    """Mean and (biased) variance of `inputs` over `axes` and over all ranks.

    weights: optional per-row weights broadcastable to `inputs` (Keras masks).
    Sums travel as float64 so E[x^2] - E[x]^2 keeps its precision.
    """
    x = tf.cast(inputs, tf.float64)
    if weights is None:
        weights = tf.ones_like(x)
    else:
        weights = tf.broadcast_to(tf.cast(weights, tf.float64), tf.shape(x))
    total = tf.reduce_sum(weights * x, axes, keepdims=True)
    squares = tf.reduce_sum(weights * tf.square(x), axes, keepdims=True)
    count = tf.reduce_sum(weights, axes, keepdims=True)
    shape = tf.shape(total)
    packed = tf.concat([tf.reshape(total, [-1]), tf.reshape(squares, [-1]),
                        tf.reshape(count, [-1])], axis=0)
    total, squares, count = tf.split(ops.allreduce(packed, op=ops.Sum, name=name), 3)
    mean = total / count
    variance = tf.maximum(squares / count - tf.square(mean), 0.0)
    mean, variance = tf.reshape(mean, shape), tf.reshape(variance, shape)
    if not keepdims:
        mean, variance = tf.squeeze(mean, axes), tf.squeeze(variance, axes)
    return tf.cast(mean, inputs.dtype), tf.cast(variance, inputs.dtype)


def _mask_weights(mask):
    return None if mask is None else tf.expand_dims(tf.cast(mask, tf.float64), -1)


def _collective_name(layer):
    # Graphs name the collective after its node; eager calls need one per layer.
    return "sync_batch_norm." + layer.name if tf.executing_eagerly() else None


class _Keras3Moments:
    """Keras 3: BatchNormalization.call asks _moments for squeezed statistics."""

    def _moments(self, inputs, mask):
        return cross_rank_moments(inputs, self._reduction_axes, keepdims=False,
                                  weights=_mask_weights(mask), name=_collective_name(self))


class _Keras2Moments:
    """Keras 2 and tf_keras: the non-fused path computes moments here."""

    def _calculate_mean_and_var(self, inputs, reduction_axes, keep_dims, mask=None):
        return cross_rank_moments(inputs, reduction_axes, keepdims=keep_dims,
                                  weights=_mask_weights(mask), name=_collective_name(self))


_KERAS2 = hasattr(_BatchNormalization, "_calculate_mean_and_var")


class SyncBatchNormalization(_Keras2Moments if _KERAS2 else _Keras3Moments, _BatchNormalization):
    """BatchNormalization whose training statistics cover the batch of every
    rank (see the module docstring). Takes BatchNormalization's arguments;
    fused kernels compute local statistics only, so `fused` must stay off."""

    def __init__(self, *args, **kwargs):
        if kwargs.pop("fused", None):
            raise ValueError("SyncBatchNormalization does not support fused=True: the fused "
                             "kernel computes statistics of the local batch only")
        if _KERAS2:
            kwargs["fused"] = False  # Keras 2 would otherwise pick the fused kernel itself
        super().__init__(*args, **kwargs)
