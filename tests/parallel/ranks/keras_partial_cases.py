"""Checks of local (not averaged) layers shared by mpi_keras.py (Keras 3),
mpi_tf_keras.py (tf_keras) and mpi_local_variables.py: a model whose first
layer is averaged and whose head stays each rank's own, replayed in NumPy
rank by rank to give what every rank must end with."""
import numpy as np
import tensorflow as tf

import tf_ring.keras as hvd
from keras_cases import (LR, PER_RANK_BATCH, assert_same_on_all_ranks, assert_weights_close,
                         gather_all, global_data, make_model, shard)


# --- local (not averaged) layers --------------------------------------------------------------
# make_model's first Dense layer is shared, its last (the head) is local to each rank. Ranks
# start from different weights (seeded by rank); the shared layer gets rank 0's by broadcast.

def make_partial_model(k, rank):
    model = make_model(k, weight_seed=rank)
    model.layers[0].set_weights(make_model(k, weight_seed=0).layers[0].get_weights())
    return model


def replay_partial_training(k, steps, x, y, scale_local_gradients):
    """One process replays every rank: shared gradients averaged over ranks,
    each head updated with its own rank's gradient (divided by the size when
    scale_local_gradients). Returns [(shared weights, head weights)] per rank."""
    models = [make_partial_model(k, r) for r in range(hvd.size())]
    loss_fn = k.losses.MeanSquaredError()
    rows = PER_RANK_BATCH
    for step in range(steps):
        shared_sum, heads = None, []
        for r, model in enumerate(models):
            xb = shard(x, r)[step * rows:(step + 1) * rows]
            yb = shard(y, r)[step * rows:(step + 1) * rows]
            with tf.GradientTape() as tape:
                loss = loss_fn(yb, model(xb, training=True))
            shared_vars, head_vars = model.layers[0].trainable_weights, model.layers[-1].trainable_weights
            grads = tape.gradient(loss, shared_vars + head_vars)
            shared = [g.numpy() for g in grads[:len(shared_vars)]]
            shared_sum = shared if shared_sum is None else [a + b for a, b in zip(shared_sum, shared)]
            heads.append([g.numpy() for g in grads[len(shared_vars):]])
        for model, head in zip(models, heads):
            scale = 1.0 / hvd.size() if scale_local_gradients else 1.0
            for var, g in zip(model.layers[0].trainable_weights, shared_sum):
                var.assign(var.numpy() - LR * g / hvd.size())
            for var, g in zip(model.layers[-1].trainable_weights, head):
                var.assign(var.numpy() - LR * scale * g)
    return [(m.layers[0].get_weights(), m.layers[-1].get_weights()) for m in models]


def assert_partial_result(model, x, y, steps, scale_local_gradients, name):
    k = _keras_of(model)
    replay = replay_partial_training(k, steps, x, y, scale_local_gradients)
    shared, head = replay[hvd.rank()]
    assert_weights_close(model.layers[0].get_weights(), shared)
    assert_weights_close(model.layers[-1].get_weights(), head)
    # The heads stayed apart: rank 0's and rank 1's differ, in training as in the replay.
    heads = gather_all(model.layers[-1].get_weights(), name)
    assert np.abs(heads[0] - heads[1]).max() > 1e-3
    assert_same_on_all_ranks(model.layers[0].get_weights(), name + ".shared")


def _keras_of(model):
    import keras
    if isinstance(model, keras.Model):
        return keras
    import tf_keras
    return tf_keras


def check_partial_optimizer(k, sgd, scale_local_gradients, steps=3):
    """PartialDistributedOptimizer with model.fit, and the broadcast callback
    leaving the local head alone."""
    x, y = global_data(steps, seed=21)
    model = make_model(k, weight_seed=hvd.rank())  # every rank starts elsewhere
    head = model.layers[-1]
    optimizer = hvd.PartialDistributedOptimizer(sgd(LR), local_layers=[head],
                                                scale_local_gradients=scale_local_gradients)
    model.compile(optimizer, loss="mse")
    callback = hvd.callbacks.BroadcastGlobalVariablesCallback(
        0, local_variables=head.trainable_weights)
    model.fit(shard(x), shard(y), batch_size=PER_RANK_BATCH, shuffle=False, verbose=0,
              callbacks=[callback])
    assert_partial_result(model, x, y, steps, scale_local_gradients,
                          "partial_fit_%s" % scale_local_gradients)


def check_register_local_var(k, sgd, steps=2):
    """DistributedOptimizer.register_local_var, used from a custom tf.function step."""
    x, y = global_data(steps, seed=23)
    model = make_partial_model(k, hvd.rank())
    optimizer = hvd.DistributedOptimizer(sgd(LR), scale_local_gradients=False)
    for var in model.layers[-1].trainable_weights:
        optimizer.register_local_var(var)
    loss_fn = k.losses.MeanSquaredError()

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                      model.trainable_variables))

    xs, ys = shard(x), shard(y)
    for i in range(steps):
        step(xs[i * PER_RANK_BATCH:(i + 1) * PER_RANK_BATCH],
             ys[i * PER_RANK_BATCH:(i + 1) * PER_RANK_BATCH])
    assert_partial_result(model, x, y, steps, False, "register_local_var")
