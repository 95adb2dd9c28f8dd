"""Checks shared by mpi_keras.py (Keras 3) and mpi_tf_keras.py (tf_keras).

Each check takes `k`, the Keras package under test, and compares distributed
training on every rank with a plain single-process copy trained on the whole
global batch, computed on the same rank from the same starting weights.
"""
import numpy as np
import pytest
import tensorflow as tf

import tf_ring.keras as hvd
from helpers import every_rank_here

PER_RANK_BATCH = 4
FEATURES = 6
LR = 0.1


def make_model(k, weight_seed=0):
    model = k.Sequential([k.Input((FEATURES,)), k.layers.Dense(8, activation="tanh"),
                          k.layers.Dense(3)])
    rng = np.random.default_rng(weight_seed)
    model.set_weights([rng.normal(0, 0.5, w.shape).astype(np.float32) for w in model.get_weights()])
    return model


def global_data(steps, seed=1):
    """Every rank generates the same full data set; rows of one global batch are consecutive."""
    rng = np.random.default_rng(seed)
    n = steps * PER_RANK_BATCH * hvd.size()
    return (rng.normal(size=(n, FEATURES)).astype(np.float32),
            rng.normal(size=(n, 3)).astype(np.float32))


def shard(array, rank=None):
    """This rank's PER_RANK_BATCH rows of every global batch."""
    rank = hvd.rank() if rank is None else rank
    per_batch = array.reshape(-1, hvd.size(), PER_RANK_BATCH, array.shape[-1])
    return per_batch[:, rank].reshape(-1, array.shape[-1])


def assert_weights_close(actual, expected):
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-5)


def assert_weights_differ(a_list, b_list):
    assert max(np.abs(a - b).max() for a, b in zip(a_list, b_list)) > 1e-3


def gather_all(values, name):
    """Each rank's list of arrays, as a list per rank (via allgather)."""
    flat = np.concatenate([np.asarray(v, np.float64).ravel() for v in values])
    gathered = hvd.allgather(tf.constant(flat[None]), name=name).numpy()
    return list(gathered)


def assert_same_on_all_ranks(values, name):
    rows = gather_all(values, name)
    for row in rows[1:]:
        np.testing.assert_allclose(row, rows[0], rtol=0, atol=0)


def optimizer_variables(optimizer):
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables)


# --- DistributedOptimizer ---------------------------------------------------------------------

def check_matches_single_process(k, sgd, steps=3, **compile_kwargs):
    x, y = global_data(steps)
    model = make_model(k)
    model.compile(hvd.DistributedOptimizer(sgd(LR)), loss="mse", **compile_kwargs)
    model.fit(shard(x), shard(y), batch_size=PER_RANK_BATCH, shuffle=False, verbose=0)

    reference = make_model(k)
    reference.compile(sgd(LR), loss="mse")
    reference.fit(x, y, batch_size=PER_RANK_BATCH * hvd.size(), shuffle=False, verbose=0)
    assert_weights_close(model.get_weights(), reference.get_weights())

    # Proof that the ranks exchanged gradients: training on this shard alone lands elsewhere.
    alone = make_model(k)
    alone.compile(sgd(LR), loss="mse")
    alone.fit(shard(x), shard(y), batch_size=PER_RANK_BATCH, shuffle=False, verbose=0)
    assert_weights_differ(model.get_weights(), alone.get_weights())
    assert int(model.optimizer.iterations.numpy()) == steps


def check_custom_training_loop(k, sgd, steps=3):
    """apply_gradients called from the user's own tf.function step."""
    x, y = global_data(steps, seed=11)
    model, reference = make_model(k), make_model(k)
    optimizer, plain = hvd.DistributedOptimizer(sgd(LR)), sgd(LR)
    loss_fn = k.losses.MeanSquaredError()

    def make_step(net, opt):
        @tf.function
        def step(xb, yb):
            with tf.GradientTape() as tape:
                loss = loss_fn(yb, net(xb, training=True))
            opt.apply_gradients(zip(tape.gradient(loss, net.trainable_variables),
                                    net.trainable_variables))
        return step

    step, reference_step = make_step(model, optimizer), make_step(reference, plain)
    xs, ys = shard(x), shard(y)
    rows = PER_RANK_BATCH * hvd.size()
    for i in range(steps):
        step(xs[i * PER_RANK_BATCH:(i + 1) * PER_RANK_BATCH],
             ys[i * PER_RANK_BATCH:(i + 1) * PER_RANK_BATCH])
        reference_step(x[i * rows:(i + 1) * rows], y[i * rows:(i + 1) * rows])
    assert_weights_close(model.get_weights(), reference.get_weights())


def check_sparse_gradients(k, sgd, sparse_as_dense):
    """An Embedding's IndexedSlices gradient is averaged like a dense one."""
    rng = np.random.default_rng(13)
    n = 2 * PER_RANK_BATCH * hvd.size()
    tokens = rng.integers(0, 20, size=(n, 5)).astype(np.int32)
    targets = rng.normal(size=(n, 1)).astype(np.float32)

    def build():
        net = k.Sequential([k.Input((5,), dtype="int32"), k.layers.Embedding(20, 4),
                            k.layers.Flatten(), k.layers.Dense(1)])
        weights_rng = np.random.default_rng(0)
        net.set_weights([weights_rng.normal(0, 0.5, w.shape).astype(np.float32)
                         for w in net.get_weights()])
        return net

    model, reference = build(), build()
    model.compile(hvd.DistributedOptimizer(sgd(LR), sparse_as_dense=sparse_as_dense), loss="mse")
    reference.compile(sgd(LR), loss="mse")
    model.fit(shard(tokens), shard(targets), batch_size=PER_RANK_BATCH, shuffle=False, verbose=0)
    reference.fit(tokens, targets, batch_size=PER_RANK_BATCH * hvd.size(), shuffle=False,
                  verbose=0)
    assert_weights_close(model.get_weights(), reference.get_weights())


class HalfPrecision:
    """A compression object as DistributedOptimizer expects; counts what it sends."""

    def __init__(self):
        self.compressed = 0

    def compress(self, tensor):
        self.compressed += 1
        return tf.cast(tensor, tf.float16), tensor.dtype

    def decompress(self, tensor, dtype):
        return tf.cast(tensor, dtype)


def check_compression(k, sgd, steps=2):
    x, y = global_data(steps, seed=15)
    compression = HalfPrecision()
    model, reference = make_model(k), make_model(k)
    model.compile(hvd.DistributedOptimizer(sgd(LR), compression=compression), loss="mse")
    reference.compile(sgd(LR), loss="mse")
    model.fit(shard(x), shard(y), batch_size=PER_RANK_BATCH, shuffle=False, verbose=0)
    reference.fit(x, y, batch_size=PER_RANK_BATCH * hvd.size(), shuffle=False, verbose=0)
    assert compression.compressed == len(model.trainable_variables)  # once per gradient, traced
    for a, e in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(a, e, rtol=1e-2, atol=2e-3)


def check_keeps_optimizer_class_and_config(k, sgd):
    original = sgd(learning_rate=k.optimizers.schedules.ExponentialDecay(0.5, 10, 0.5))
    wrapped = hvd.DistributedOptimizer(original, backward_passes_per_step=2)
    assert isinstance(wrapped, type(original))
    assert type(wrapped).__name__ == type(original).__name__
    assert wrapped.get_config() == original.get_config()
    again = type(wrapped).from_config(wrapped.get_config())
    assert again.get_config() == original.get_config()
    with pytest.raises(ValueError, match="op must be"):
        hvd.DistributedOptimizer(sgd(LR), op=hvd.Max)
    with pytest.raises(TypeError, match="optimizer"):
        hvd.DistributedOptimizer(object())


def check_backward_passes(k, sgd, average_aggregated):
    groups = 2
    x, y = global_data(2 * groups, seed=3)
    model = make_model(k)
    model.compile(hvd.DistributedOptimizer(sgd(LR), backward_passes_per_step=2,
                                           average_aggregated_gradients=average_aggregated),
                  loss="mse")
    model.fit(shard(x), shard(y), batch_size=PER_RANK_BATCH, shuffle=False, verbose=0)
    assert int(model.optimizer.iterations.numpy()) == 2 * groups

    # Reference: per group, the full-batch gradients of both batches at the same
    # weights, summed (or averaged), then one plain SGD step.
    reference = make_model(k)
    loss_fn = k.losses.MeanSquaredError()
    rows = PER_RANK_BATCH * hvd.size()
    for group in range(groups):
        total = None
        for batch in (2 * group, 2 * group + 1):
            xb, yb = x[batch * rows:(batch + 1) * rows], y[batch * rows:(batch + 1) * rows]
            with tf.GradientTape() as tape:
                loss = loss_fn(yb, reference(xb, training=True))
            grads = tape.gradient(loss, reference.trainable_variables)
            total = grads if total is None else [a + b for a, b in zip(total, grads)]
        scale = 0.5 if average_aggregated else 1.0
        for var, grad in zip(reference.trainable_variables, total):
            var.assign(var - LR * scale * grad)
    assert_weights_close(model.get_weights(), reference.get_weights())


def check_save_and_load(k, sgd, tmp_path, suffix):
    x, y = global_data(4, seed=5)
    model = make_model(k)
    model.compile(hvd.DistributedOptimizer(sgd(LR)), loss="mse")
    model.fit(shard(x[:len(x) // 2]), shard(y[:len(y) // 2]), batch_size=PER_RANK_BATCH,
              shuffle=False, verbose=0)
    path = str(tmp_path / ("model_rank%d%s" % (hvd.rank(), suffix)))
    model.save(path)

    loaded = hvd.load_model(path)
    assert isinstance(loaded.optimizer, type(sgd(LR)))
    assert loaded.optimizer._tf_ring_settings is not None
    assert int(loaded.optimizer.iterations.numpy()) == 2
    assert_weights_close(loaded.get_weights(), model.get_weights())

    # The reloaded model keeps training in lockstep with a plain full-batch reference.
    reference = k.models.load_model(path)
    loaded.fit(shard(x[len(x) // 2:]), shard(y[len(y) // 2:]), batch_size=PER_RANK_BATCH,
               shuffle=False, verbose=0)
    reference.fit(x[len(x) // 2:], y[len(y) // 2:], batch_size=PER_RANK_BATCH * hvd.size(),
                  shuffle=False, verbose=0)
    assert_weights_close(loaded.get_weights(), reference.get_weights())
    assert_weights_differ(loaded.get_weights(), model.get_weights())


# --- callbacks --------------------------------------------------------------------------------

def check_broadcast_callback(k, make_optimizer, prebuild, name):
    """Ranks start from different weights (and, when prebuilt, different optimizer
    state) and end identical; without the callback they would not."""
    x, y = global_data(2, seed=7)
    model = make_model(k, weight_seed=100 + hvd.rank())
    optimizer = hvd.DistributedOptimizer(make_optimizer())
    if prebuild:
        optimizer.build(model.trainable_variables)
        for var in optimizer_variables(optimizer):
            var.assign(tf.cast(tf.fill(var.shape, 0.01 * (hvd.rank() + 1)), var.dtype))
    root_weights = make_model(k, weight_seed=100).get_weights()
    model.compile(optimizer, loss="mse")

    seen_at_first_batch = {}

    class RecordFirstBatch(k.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if batch == 0:
                seen_at_first_batch["weights"] = self.model.get_weights()

    model.fit(shard(x), shard(y), batch_size=PER_RANK_BATCH, shuffle=False, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), RecordFirstBatch()])
    assert_weights_close(seen_at_first_batch["weights"], root_weights)
    assert_same_on_all_ranks(model.get_weights(), name + ".weights")
    state = [v.numpy() for v in optimizer_variables(model.optimizer)]
    assert state, "the optimizer has no state to compare"
    assert_same_on_all_ranks(state, name + ".optimizer")


def check_metric_average(k, sgd):
    x, y = global_data(3, seed=9)
    model = make_model(k)
    model.compile(hvd.DistributedOptimizer(sgd(LR)), loss="mse", metrics=["mae"])
    before, after = {}, {}

    class Record(k.callbacks.Callback):
        def __init__(self, into):
            super().__init__()
            self.into = into

        def on_epoch_end(self, epoch, logs=None):
            self.into.update({key: float(value) for key, value in logs.items()})

    model.fit(shard(x), shard(y), batch_size=PER_RANK_BATCH, shuffle=False, verbose=0, epochs=1,
              validation_data=(shard(x), shard(y)),
              callbacks=[Record(before), hvd.callbacks.MetricAverageCallback(), Record(after)])
    names = sorted(n for n in before if n in ("loss", "mae", "val_loss", "val_mae"))
    assert len(names) == 4, before
    per_rank = np.array(gather_all([before[n] for n in names], "metric_average_check"))
    assert np.ptp(per_rank[:, names.index("val_loss")]) > 0, "ranks' metrics should differ"
    for i, n in enumerate(names):
        np.testing.assert_allclose(after[n], per_rank[:, i].mean(), rtol=1e-6)


class RecordLearningRate:
    """A callback factory recording the lr seen at each batch begin."""

    @staticmethod
    def make(k, into):
        class Record(k.callbacks.Callback):
            def on_train_batch_begin(self, batch, logs=None):
                lr = self.model.optimizer.learning_rate
                into.append(float(np.asarray(tf.convert_to_tensor(lr))))
        return Record()


def check_schedule(k, sgd):
    steps, initial_lr = 2, 0.2
    x, y = global_data(steps)
    model = make_model(k)
    model.compile(hvd.DistributedOptimizer(sgd(0.05)), loss="mse")
    seen = []
    schedule = hvd.callbacks.LearningRateScheduleCallback(
        initial_lr, lambda epoch: 0.5 ** epoch, start_epoch=1, end_epoch=3, staircase=True)
    smooth = hvd.callbacks.LearningRateScheduleCallback(
        initial_lr, lambda epoch: 1.0 / (1.0 + epoch), start_epoch=3, staircase=False)
    model.fit(shard(x), shard(y), batch_size=PER_RANK_BATCH, shuffle=False, verbose=0, epochs=5,
              callbacks=[schedule, smooth, RecordLearningRate.make(k, seen)])
    expected = [0.05, 0.05,                      # epoch 0: before start_epoch, untouched
                0.1, 0.1, 0.05, 0.05,            # epochs 1-2: staircase 0.2 * 0.5 ** epoch
                0.2 / 4.0, 0.2 / 4.5,            # epochs 3-4: 0.2 / (1 + epoch + batch / 2)
                0.2 / 5.0, 0.2 / 5.5]
    np.testing.assert_allclose(seen, expected, rtol=1e-6)


def check_momentum_correction(k, sgd):
    """When the lr halves, the momentum carried into that step halves too."""
    x, y = global_data(2)
    model = make_model(k)
    model.compile(hvd.DistributedOptimizer(sgd(0.1, momentum=0.9)), loss="mse")
    model.fit(shard(x), shard(y), batch_size=PER_RANK_BATCH, shuffle=False, verbose=0)
    slots_before = [s.numpy() for s in model.optimizer.momentums]
    assert max(np.abs(s).max() for s in slots_before) > 0
    seen = {}

    class Record(k.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if batch == 0:
                seen["slots"] = [s.numpy() for s in self.model.optimizer.momentums]

    model.fit(shard(x), shard(y), batch_size=PER_RANK_BATCH, shuffle=False, verbose=0,
              callbacks=[hvd.callbacks.LearningRateScheduleCallback(0.05, 1.0), Record()])
    for got, before in zip(seen["slots"], slots_before):
        np.testing.assert_allclose(got, 0.5 * before, rtol=1e-6)


def check_legacy_momentum_correction(k, legacy_sgd):
    """Legacy optimizers keep momentum as a variable: it is scaled for the batch
    where the lr changes and restored after it."""
    x, y = global_data(2)
    model = make_model(k)
    model.compile(hvd.DistributedOptimizer(legacy_sgd(0.1, momentum=0.9)), loss="mse")
    seen = []

    class Record(k.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            seen.append(float(np.asarray(self.model.optimizer.momentum)))

    model.fit(shard(x), shard(y), batch_size=PER_RANK_BATCH, shuffle=False, verbose=0,
              callbacks=[hvd.callbacks.LearningRateScheduleCallback(0.05, 1.0), Record()])
    np.testing.assert_allclose(seen, [0.45, 0.9], rtol=1e-6)
    assert float(np.asarray(model.optimizer.momentum)) == pytest.approx(0.9)


def check_horovod_optimizer_arguments(k, sgd, steps=2):
    """Horovod's deprecated-but-public arguments are accepted; with op=Average
    the predivide factor and groups leave the result unchanged."""
    x, y = global_data(steps, seed=25)
    model = make_model(k)
    with pytest.warns(DeprecationWarning, match="num_groups"):
        optimizer = hvd.DistributedOptimizer(
            sgd(LR), name="Distributed", device_dense="/cpu:0", device_sparse="/cpu:0",
            compression=hvd.Compression.none, sparse_as_dense=True, gradient_predivide_factor=2.0,
            op=hvd.Average, backward_passes_per_step=1, average_aggregated_gradients=False,
            num_groups=2, groups=None, scale_local_gradients=True)
    model.compile(optimizer, loss="mse")
    model.fit(shard(x), shard(y), batch_size=PER_RANK_BATCH, shuffle=False, verbose=0)
    reference = make_model(k)
    reference.compile(sgd(LR), loss="mse")
    reference.fit(x, y, batch_size=PER_RANK_BATCH * hvd.size(), shuffle=False, verbose=0)
    assert_weights_close(model.get_weights(), reference.get_weights())
    with pytest.raises(ValueError, match="groups"):
        hvd.DistributedOptimizer(sgd(LR), groups=-1)
    with pytest.raises(ValueError, match="local_layers"):
        hvd.PartialDistributedOptimizer(sgd(LR), local_layers=[object()])


# --- BestModelCheckpoint ----------------------------------------------------------------------

def check_best_model_checkpoint(k, sgd, tmp_path, suffix):
    """A scripted val_loss (3, 1, 2, 0.5): the model is saved after epochs 1, 2
    and 4, not 3, by rank 0 only (the file name carries the writer's rank),
    and the file holds the weights of that epoch."""
    from helpers import check_on_root

    scripted = [3.0, 1.0, 2.0, 0.5]
    directory = hvd.broadcast_object(str(tmp_path), root_rank=0, name="best_ckpt_dir")
    weights_at_epoch = {}

    class Script(k.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            logs["val_loss"] = scripted[epoch]
            logs["rank"] = hvd.rank()
            weights_at_epoch[epoch + 1] = self.model.get_weights()

    x, y = global_data(4)
    model = make_model(k)
    model.compile(hvd.DistributedOptimizer(sgd(LR)), loss="mse")
    best = hvd.callbacks.BestModelCheckpoint(
        monitor="val_loss", mode="min",
        filepath=directory + "/best_{epoch}_rank{rank}" + suffix)
    model.fit(shard(x), shard(y), batch_size=PER_RANK_BATCH, epochs=4, shuffle=False, verbose=0,
              callbacks=[Script(), best])

    def check():
        import os
        assert best.best == 0.5
        assert sorted(os.listdir(directory)) == sorted(
            "best_%d_rank0%s" % (e, suffix) for e in (1, 2, 4))
        saved = k.models.load_model(directory + "/best_2_rank0" + suffix, compile=False)
        assert_weights_close(saved.get_weights(), weights_at_epoch[2])
        assert_weights_differ(saved.get_weights(), weights_at_epoch[4])

    check_on_root(check, "best_ckpt_check")

    unset = hvd.callbacks.BestModelCheckpoint()
    with pytest.raises(ValueError, match="no filepath"):
        model.fit(shard(x), shard(y), batch_size=PER_RANK_BATCH, epochs=1, verbose=0,
                  callbacks=[unset])


# --- process sets ----------------------------------------------------------------------------

def check_fit_on_process_set(k, sgd, steps=3, **compile_kwargs):
    """DistributedOptimizer(process_set=) with the set's broadcast callback:
    the members {0, 1} train on their shares (different starting weights,
    made equal by the callback) and end where one process lands on their
    global batches; ranks outside the set take no part."""
    import tf_ring
    ps = hvd.ProcessSet([0, 1])  # tf_ring.keras exports the process set API too
    # The engine restarts with the set: first every rank leaves the previous
    # test (a peer still finishing a refused step would see it shut down).
    every_rank_here()
    tf_ring.shutdown()
    tf_ring.init(process_sets=[ps])
    try:
        if ps.included():
            rng = np.random.default_rng(4)
            n = steps * PER_RANK_BATCH * ps.size()
            x = rng.normal(size=(n, FEATURES)).astype(np.float32)
            y = rng.normal(size=(n, 3)).astype(np.float32)
            rows = x.reshape(steps, ps.size(), PER_RANK_BATCH, FEATURES)[:, ps.rank()]
            targets = y.reshape(steps, ps.size(), PER_RANK_BATCH, 3)[:, ps.rank()]
            model = make_model(k, weight_seed=10 + tf_ring.rank())
            model.compile(hvd.DistributedOptimizer(sgd(LR), process_set=ps), loss="mse",
                          **compile_kwargs)
            model.fit(rows.reshape(-1, FEATURES), targets.reshape(-1, 3), batch_size=PER_RANK_BATCH,
                      shuffle=False, verbose=0,
                      callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(
                          ps.ranks[0], process_set=ps)])
            reference = make_model(k, weight_seed=10 + ps.ranks[0])
            reference.compile(sgd(LR), loss="mse")
            reference.fit(x, y, batch_size=PER_RANK_BATCH * ps.size(), shuffle=False, verbose=0)
            assert_weights_close(model.get_weights(), reference.get_weights())
            for key, value in compile_kwargs.items():
                assert getattr(model, key) == value  # e.g. XLA stayed on
    finally:
        tf_ring.barrier(name="fit_on_process_set.done")
        tf_ring.shutdown()
        tf_ring.init()
