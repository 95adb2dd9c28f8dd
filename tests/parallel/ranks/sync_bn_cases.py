"""Checks of SyncBatchNormalization shared by mpi_sync_batch_norm.py (Keras 3)
and mpi_sync_batch_norm_tf_keras.py (tf_keras).

The reference is one process running ordinary BatchNormalization on the
concatenation of every rank's rows, which each rank computes itself."""
import numpy as np
import tensorflow as tf

import tf_ring.keras as hvd

MOMENTUM, EPSILON, STEPS = 0.8, 1e-3, 3


def rows_of(rank):
    return rank + 2  # uneven on purpose: the global statistics must weight by rows


def step_parts(step):
    """Every rank's input for `step`; rank r's rows are centred at r, so local
    and global statistics differ clearly."""
    rng = np.random.default_rng(50 + step)
    return [rng.normal(loc=r + step, scale=1.0 + r, size=(rows_of(r), 3, 4)).astype(np.float32)
            for r in range(hvd.size())]


def plain_batch_norm(k, **kwargs):
    if k.__name__ == "tf_keras":
        kwargs["fused"] = False  # the fused kernel updates the moving variance differently
    return k.layers.BatchNormalization(momentum=MOMENTUM, epsilon=EPSILON, **kwargs)


def check_training_statistics(k, in_function):
    layer = hvd.SyncBatchNormalization(momentum=MOMENTUM, epsilon=EPSILON)
    reference, alone = plain_batch_norm(k), plain_batch_norm(k)
    call = (tf.function(lambda x: layer(x, training=True)) if in_function
            else (lambda x: layer(x, training=True)))
    rank = hvd.rank()
    start = sum(rows_of(r) for r in range(rank))
    for step in range(STEPS):
        parts = step_parts(step)
        out = call(parts[rank]).numpy()
        expected = reference(np.concatenate(parts), training=True).numpy()[start:start + rows_of(rank)]
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
        local_only = alone(parts[rank], training=True).numpy()
        assert np.abs(local_only - expected).max() > 0.1  # the global statistics mattered
    for ours, theirs in [(layer.moving_mean, reference.moving_mean),
                         (layer.moving_variance, reference.moving_variance)]:
        np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-5, atol=1e-5)
    # Inference: this rank's rows alone, with the (global) moving statistics.
    x = step_parts(STEPS)[rank]
    np.testing.assert_allclose(layer(x, training=False).numpy(),
                               reference(x, training=False).numpy(), rtol=1e-5, atol=1e-5)


def check_fit_matches_single_process(k, steps=3, per_rank=4, lr=0.1):
    """Gradients flow through the cross-rank statistics: ranks fitting equal
    shares end with the weights (and moving statistics) of one process with
    plain BatchNormalization on the whole batch."""
    def build(norm):
        model = k.Sequential([k.Input((5,)), k.layers.Dense(6), norm, k.layers.Activation("tanh"),
                              k.layers.Dense(1)])
        rng = np.random.default_rng(3)
        # Same start everywhere; the normalization's own four weights keep their defaults.
        model.set_weights([w if 2 <= i < 6 else rng.normal(0, 0.5, w.shape).astype(np.float32)
                           for i, w in enumerate(model.get_weights())])
        return model

    rng = np.random.default_rng(9)
    n = steps * per_rank * hvd.size()
    x = rng.normal(loc=1.0, size=(n, 5)).astype(np.float32)
    y = rng.normal(size=(n, 1)).astype(np.float32)
    batches = x.reshape(steps, hvd.size(), per_rank, 5), y.reshape(steps, hvd.size(), per_rank, 1)
    my_x = batches[0][:, hvd.rank()].reshape(-1, 5)
    my_y = batches[1][:, hvd.rank()].reshape(-1, 1)

    model = build(hvd.SyncBatchNormalization(momentum=MOMENTUM, epsilon=EPSILON))
    model.compile(hvd.DistributedOptimizer(k.optimizers.SGD(lr)), loss="mse")
    model.fit(my_x, my_y, batch_size=per_rank, shuffle=False, verbose=0)

    reference = build(plain_batch_norm(k))
    reference.compile(k.optimizers.SGD(lr), loss="mse")
    reference.fit(x, y, batch_size=per_rank * hvd.size(), shuffle=False, verbose=0)
    for ours, theirs in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)
