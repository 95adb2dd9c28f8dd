"""DistributedOptimizer(shard_state=True) with Keras 3 (docs/sharded-state.md).

Each rank trains on its 1/n of every global batch with its 1/n of the
optimizer's state; the weights must end where a single-process plain Keras
run on the global batches ends (computed on every rank), within float32
rounding, and be the same on every rank. The state each rank holds is
measured against the plan's share, and against a plain optimizer's state.
"""
import os

import numpy as np
import pytest
import tensorflow as tf
import keras

import tf_ring
import tf_ring.keras as hvd
from tf_ring.keras._sharded_state import own_keys

STEPS, PER_RANK, LR = 30, 4, 1e-3
VOCAB, TOKENS = 40, 5


def _weights(model, seed):
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(0, 0.5, w.shape).astype(np.float32)
                       for w in model.get_weights()])
    return model


def _mlp(seed=0):
    """A few large variables next to small ones; rows of 96 and 64 elements."""
    return _weights(keras.Sequential([keras.Input((48,)),
                                      keras.layers.Dense(96, activation="tanh"),
                                      keras.layers.Dense(64, activation="tanh"),
                                      keras.layers.Dense(3)]), seed)


def _embedding(seed=0):
    """The Embedding's rows are cut between ranks (on 3 ranks too)."""
    return _weights(keras.Sequential([keras.Input((TOKENS,), dtype="int32"),
                                      keras.layers.Embedding(VOCAB, 8), keras.layers.Flatten(),
                                      keras.layers.Dense(1)]), seed)


MODELS = {"mlp": _mlp, "embedding": _embedding}


def _global_data(kind, steps=STEPS):
    rng = np.random.default_rng(5)
    rows = steps * PER_RANK * hvd.size()
    if kind == "embedding":
        x = rng.integers(0, VOCAB, size=(rows, TOKENS)).astype(np.int32)
        y = rng.normal(size=(rows, 1)).astype(np.float32)
    else:
        x = rng.normal(size=(rows, 48)).astype(np.float32)
        y = rng.normal(size=(rows, 3)).astype(np.float32)
    return x, y


def _shard(array):
    """This rank's PER_RANK rows of every global batch (global batches are consecutive rows)."""
    steps = array.reshape((-1, hvd.size(), PER_RANK) + array.shape[1:])
    return steps[:, hvd.rank()].reshape((-1,) + array.shape[1:])


def _fit(model, optimizer, x, y, batch, **fit_kwargs):
    model.compile(optimizer, loss="mse")
    model.fit(x, y, batch_size=batch, shuffle=False, verbose=0, **fit_kwargs)
    return model.get_weights()


def _loop(model, optimizer, x, y, batch, expect_sparse=False):
    """A tf.function loop: plain GradientTape, then optimizer.apply_gradients."""
    loss_fn = keras.losses.MeanSquaredError()

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        assert any(isinstance(g, tf.IndexedSlices) for g in grads) == expect_sparse
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    for i in range(len(x) // batch):
        step(x[i * batch:(i + 1) * batch], y[i * batch:(i + 1) * batch])
    return model.get_weights()


def _train(kind, mode, optimizer, x, y, batch, seed=0):
    model = MODELS[kind](seed)
    if mode == "fit":
        return _fit(model, optimizer, x, y, batch)
    return _loop(model, optimizer, x, y, batch, expect_sparse=kind == "embedding")


def _assert_same_on_every_rank(weights, name):
    flat = np.concatenate([np.ravel(w) for w in weights])[None]
    gathered = hvd.allgather(tf.constant(flat), name=name).numpy()
    for row in gathered[1:]:
        np.testing.assert_array_equal(row, gathered[0])


def _assert_follows(actual, expected, atol=2e-6):
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=atol)


def _assert_as_unsharded(sharded, unsharded):
    """The unsharded DistributedOptimizer on the same shards reduces the same
    gradients and runs the same elementwise math: at most rounding apart
    (measured: bitwise equal on 2 ranks)."""
    apart = max(np.abs(a - b).max() for a, b in zip(sharded, unsharded))
    assert apart < 1e-6, apart


def _sharded(optimizer, **kwargs):
    return hvd.DistributedOptimizer(optimizer, shard_state=True, **kwargs)


@pytest.mark.parametrize("mode", ["fit", "loop"])
@pytest.mark.parametrize("kind", ["mlp", "embedding"])
def test_sharded_adam_follows_plain_keras(kind, mode):
    x, y = _global_data(kind)
    sharded = _train(kind, mode, _sharded(keras.optimizers.Adam(LR)), _shard(x), _shard(y),
                     PER_RANK)
    plain = _train(kind, mode, keras.optimizers.Adam(LR), x, y, PER_RANK * hvd.size())
    _assert_follows(sharded, plain)
    _assert_as_unsharded(sharded, _train(kind, mode, hvd.DistributedOptimizer(
        keras.optimizers.Adam(LR)), _shard(x), _shard(y), PER_RANK))
    _assert_same_on_every_rank(sharded, "sharded.%s.%s" % (kind, mode))
    # The runs moved: a step that did nothing would not pass for a follower.
    start = MODELS[kind](0).get_weights()
    assert max(np.abs(a - b).max() for a, b in zip(plain, start)) > 1e-2


@pytest.mark.parametrize("make", [
    lambda: keras.optimizers.SGD(0.01, momentum=0.9, nesterov=True),
    lambda: keras.optimizers.RMSprop(LR, centered=True),
    lambda: keras.optimizers.Nadam(LR),
    lambda: keras.optimizers.Adagrad(0.01),
], ids=["sgd_momentum", "rmsprop_centered", "nadam", "adagrad"])
def test_sharded_elementwise_optimizers_follow_plain_keras(make):
    x, y = _global_data("mlp", steps=10)
    sharded = _train("mlp", "loop", _sharded(make()), _shard(x), _shard(y), PER_RANK)
    plain = _train("mlp", "loop", make(), x, y, PER_RANK * hvd.size())
    _assert_follows(sharded, plain)
    _assert_as_unsharded(sharded, _train("mlp", "loop", hvd.DistributedOptimizer(make()),
                                         _shard(x), _shard(y), PER_RANK))


def test_sharded_adamw_keeps_weight_decay_exclusions():
    """exclude_from_weight_decay by name and by variable reaches the pieces."""
    x, y = _global_data("mlp", steps=10)

    def run(optimizer, x, y, batch, exclude):
        model = _mlp()
        if exclude:
            optimizer.exclude_from_weight_decay(var_list=[model.layers[0].kernel],
                                                var_names=["bias"])
        return _fit(model, optimizer, x, y, batch)

    def adamw():
        return keras.optimizers.AdamW(LR, weight_decay=1.0)

    sharded = run(_sharded(adamw()), _shard(x), _shard(y), PER_RANK, True)
    _assert_as_unsharded(sharded, run(hvd.DistributedOptimizer(adamw()), _shard(x), _shard(y),
                                      PER_RANK, True))
    plain = run(adamw(), x, y, PER_RANK * hvd.size(), True)
    # One hidden unit's near-zero gradient column, normalised by Adam, carries
    # the ranks' rounding (of the mean over the batch) to 1e-5: the unsharded
    # DistributedOptimizer lands there too (checked just above).
    _assert_follows(sharded, plain, atol=5e-5)
    # The exclusions matter: without them the plain run ends elsewhere.
    decayed = run(adamw(), x, y, PER_RANK * hvd.size(), False)
    assert max(np.abs(a - b).max() for a, b in zip(decayed, plain)) > 1e-3


def _big_mlp():
    return keras.Sequential([keras.Input((256,)), keras.layers.Dense(512),
                             keras.layers.Dense(512), keras.layers.Dense(10)])


def test_sharded_state_is_this_ranks_share():
    """Adam's slots: 2 x this rank's piece elements x 4 bytes; all ranks
    together hold exactly a plain Adam's slots; the shares within 10%."""
    model = _big_mlp()
    optimizer = _sharded(keras.optimizers.Adam(LR))
    optimizer.build(model.trainable_variables)
    mine = [v for v in optimizer.variables if id(v) in own_keys(optimizer)]
    own_bytes = sum(int(np.prod(v.shape)) * 4 for v in mine)
    elements = sum(int(np.prod(v.shape)) for v in optimizer._tf_ring_settings.sharded.pieces)
    assert len(mine) == 2 * len(optimizer._tf_ring_settings.sharded.pieces)
    assert own_bytes == 2 * elements * 4
    plain = keras.optimizers.Adam(LR)
    plain.build(model.trainable_variables)
    plain_slots = [v for v in plain.variables if v is not plain.iterations
                   and v is not plain._learning_rate]
    plain_bytes = sum(int(np.prod(v.shape)) * 4 for v in plain_slots)
    assert plain_bytes == 2 * model.count_params() * 4
    shares = hvd.allgather(tf.constant([own_bytes], tf.int64), name="sharded.bytes").numpy()
    assert shares.sum() == plain_bytes
    assert shares.max() / shares.mean() - 1 < 0.10, shares
    # The rest of the optimizer (step count, learning rate) is the same on every rank.
    rest = [v for v in optimizer.variables if id(v) not in own_keys(optimizer)]
    assert {id(v) for v in rest} == {id(optimizer.iterations), id(optimizer._learning_rate)}


def test_sharded_broadcast_callback_starts_every_rank_from_rank_0():
    """Ranks start from different weights; the callback broadcasts the
    weights and the step count but not the per-rank slots, and the first
    step's pieces come from the broadcast weights: the run follows plain
    Keras from rank 0's weights."""
    x, y = _global_data("mlp", steps=10)
    model = _mlp(seed=10 + hvd.rank())
    optimizer = _sharded(keras.optimizers.Adam(LR))
    sharded = _fit(model, optimizer, _shard(x), _shard(y), PER_RANK,
                   callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    plain = _fit(_mlp(seed=10), keras.optimizers.Adam(LR), x, y, PER_RANK * hvd.size())
    _assert_follows(sharded, plain)
    _assert_same_on_every_rank(sharded, "sharded.broadcast")


def _powersgd():
    return hvd.Compression.powersgd(rank=1)


REFUSED = {
    "adafactor": (lambda: _sharded(keras.optimizers.Adafactor()), "Adafactor cannot be sharded"),
    "lamb": (lambda: _sharded(keras.optimizers.Lamb()), "Lamb cannot be sharded"),
    "muon": (lambda: _sharded(keras.optimizers.Muon()), "Muon cannot be sharded"),
    "subclass": (lambda: _sharded(type("MyAdam", (keras.optimizers.Adam,), {})()),
                 "MyAdam cannot be sharded"),
    "loss_scale": (lambda: _sharded(keras.optimizers.LossScaleOptimizer(
        keras.optimizers.Adam())), "LossScaleOptimizer"),
    "clipnorm": (lambda: _sharded(keras.optimizers.Adam(clipnorm=1.0)), "clipnorm"),
    "ema": (lambda: _sharded(keras.optimizers.Adam(use_ema=True)), "use_ema"),
    "adasum": (lambda: _sharded(keras.optimizers.Adam(), op=hvd.Adasum), "Adasum"),
    "powersgd": (lambda: _sharded(keras.optimizers.Adam(), compression=_powersgd()),
                 "PowerSGD"),
    "passes": (lambda: _sharded(keras.optimizers.Adam(), backward_passes_per_step=2),
               "backward_passes_per_step"),
    "process_set": (lambda: _sharded(keras.optimizers.Adam(),
                                     process_set=tf_ring.ProcessSet([0])), "process sets"),
    "local_variable": (lambda: _sharded(keras.optimizers.Adam()).register_local_var(
        tf.Variable(1.0)), "local variables"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_sharded_refuses_what_it_cannot_serve(case):
    make, match = REFUSED[case]
    with pytest.raises(ValueError, match=match):
        make()


def test_sharded_refuses_tf_keras_optimizers():
    import tf_keras
    with pytest.raises(ValueError, match="tf_keras"):
        _sharded(tf_keras.optimizers.Adam())


def test_sharded_refuses_xla_and_loss_scaling_when_traced():
    x, y = _global_data("mlp", steps=1)
    model = _mlp()
    model.compile(_sharded(keras.optimizers.Adam(LR)), loss="mse", jit_compile=True)
    with pytest.raises(ValueError, match="shard_state=True has no XLA path"):
        model.fit(_shard(x), _shard(y), batch_size=PER_RANK, verbose=0)
    model = _mlp()
    model.compile(keras.optimizers.LossScaleOptimizer(_sharded(keras.optimizers.Adam(LR))),
                  loss="mse")
    with pytest.raises(ValueError, match="mixed precision"):
        model.fit(_shard(x), _shard(y), batch_size=PER_RANK, verbose=0)


def test_sharded_save_refuses_to_write_a_partial_optimizer_state(tmp_path):
    """model.save, save_weights and ModelCheckpoint would write this rank's
    share as if it were the optimizer's state: they raise instead (on every
    rank here, as a rank-0-only save would on rank 0), naming the fix."""
    x, y = _global_data("mlp", steps=2)
    model = _mlp()
    model.compile(_sharded(keras.optimizers.Adam(LR)), loss="mse")
    model.fit(_shard(x), _shard(y), batch_size=PER_RANK, verbose=0)
    path = str(tmp_path / ("rank%d" % hvd.rank()))
    for save in (lambda: model.save(path + ".keras"),
                 lambda: model.save_weights(path + ".weights.h5")):
        with pytest.raises(ValueError, match=r"state is sharded .*get_weights"):
            save()
    checkpoint = keras.callbacks.ModelCheckpoint(path + "_{epoch}.keras")
    with pytest.raises(ValueError, match="state is sharded"):
        model.fit(_shard(x), _shard(y), batch_size=PER_RANK, verbose=0, callbacks=[checkpoint])
    # The fix the message names works.
    np.savez(path + ".npz", *model.get_weights())
    assert os.path.exists(path + ".npz")
