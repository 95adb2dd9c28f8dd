"""LearningRateWarmupCallback's schedule and load_model's DistributedOptimizer
settings, shared by mpi_keras_warmup_and_load.py (Keras 3) and
mpi_tf_keras_warmup_and_load.py (tf_keras)."""
import contextlib
import io

import numpy as np
import pytest
import tensorflow as tf

import tf_ring
import tf_ring.keras as hvd
from helpers import every_rank_here
from keras_cases import (FEATURES, LR, PER_RANK_BATCH, RecordLearningRate, assert_same_on_all_ranks,
                         assert_weights_close, global_data, make_model, shard)
from keras_partial_cases import make_partial_model

# --- LearningRateWarmupCallback ---------------------------------------------------------------


def check_warmup(k, sgd):
    """The lr before every batch against Horovod's documented formula, computed
    here: the fractional epoch e = epoch + (batch + 1) / steps_per_epoch gives
    initial_lr * (e * (size - 1) / warmup_epochs + 1) / size; initial_lr itself
    on the last warmup batch and after it. Epoch logs carry "lr" and "learning_rate"."""
    steps, warmup_epochs, epochs, initial_lr = 4, 2, 3, 0.1
    x, y = global_data(steps)
    model = make_model(k)
    model.compile(hvd.DistributedOptimizer(sgd(0.123)), loss="mse")
    seen, epoch_logs = [], []

    class KeepLogs(k.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            epoch_logs.append(dict(logs))

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        model.fit(shard(x), shard(y), batch_size=PER_RANK_BATCH, shuffle=False, verbose=0,
                  epochs=epochs,
                  callbacks=[hvd.callbacks.LearningRateWarmupCallback(initial_lr, warmup_epochs,
                                                                      verbose=1),
                             RecordLearningRate.make(k, seen), KeepLogs()])
    n = hvd.size()
    expected = []
    for epoch in range(epochs):
        for batch in range(steps):
            e = epoch + (batch + 1) / steps
            expected.append(initial_lr * (e * (n - 1) / warmup_epochs + 1) / n
                            if epoch < warmup_epochs else initial_lr)
    np.testing.assert_allclose(seen, expected, rtol=1e-6)
    # Exactly initial_lr (as the optimizer's float32 holds it) from the last warmup batch on.
    assert seen[warmup_epochs * steps - 1:] == [float(np.float32(initial_lr))] * (steps + 1)
    for epoch, logs in enumerate(epoch_logs):
        assert logs["lr"] == logs["learning_rate"] == seen[(epoch + 1) * steps - 1]
    assert "Epoch 2: finished gradual learning rate warmup to 0.1." in printed.getvalue()


# --- load_model ------------------------------------------------------------------------------


class PlainCompression:
    """A compression object of the test's own, to see that the same one comes back."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


def describe(optimizer, model):
    """Every DistributedOptimizer setting as the optimizer holds it; local
    variables by (layer index, weight index), which survive a reload."""
    s = optimizer._tf_ring_settings
    r = s.reducer.settings
    local = [(i, j) for i, layer in enumerate(model.layers)
             for j, var in enumerate(layer.trainable_weights) if s.reducer.is_local(var)]
    return {"op": r.op, "compression": r.compression, "passes": s.passes,
            "aggregate_scale": s.aggregate_scale, "sparse_as_dense": r.sparse_as_dense,
            "prescale": r.prescale, "postscale": r.postscale,
            "scale_local_gradients": r.scale_local_gradients,
            "process_set": r.process_set.ranks, "local": local}


def _set_data(ps, steps, seed):
    """The members' data: ps.size() * PER_RANK_BATCH rows per step; member m has block m."""
    rng = np.random.default_rng(seed)
    n = steps * PER_RANK_BATCH * ps.size()
    return (rng.normal(size=(n, FEATURES)).astype(np.float32),
            rng.normal(size=(n, 3)).astype(np.float32))


def _member_rows(array, member, members):
    per_step = array.reshape(-1, members, PER_RANK_BATCH, array.shape[-1])
    return per_step[:, member].reshape(-1, array.shape[-1])


def _replay_sum_partial(k, ps, x, y, steps):
    """One process replays the members with op=Sum, backward_passes_per_step=2,
    average_aggregated_gradients, a local head and scale_local_gradients=False:
    every 2 steps the shared layer moves by LR * (sum over members and passes) / 2,
    each member's head by LR * (its own sum over passes) / 2."""
    members = ps.size()
    models = [make_partial_model(k, r) for r in ps.ranks]
    loss_fn = k.losses.MeanSquaredError()
    totals = [None] * members
    for step in range(steps):
        for m, model in enumerate(models):
            rows = slice(step * PER_RANK_BATCH, (step + 1) * PER_RANK_BATCH)
            with tf.GradientTape() as tape:
                loss = loss_fn(_member_rows(y, m, members)[rows],
                               model(_member_rows(x, m, members)[rows], training=True))
            grads = [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]
            totals[m] = grads if totals[m] is None else [a + b for a, b in zip(totals[m], grads)]
        if step % 2 == 1:
            n_shared = len(models[0].layers[0].trainable_weights)
            shared = [sum(t[i] for t in totals) for i in range(n_shared)]
            for m, model in enumerate(models):
                variables = model.trainable_variables
                for i, var in enumerate(variables):
                    g = shared[i] if i < n_shared else totals[m][i]
                    var.assign(var.numpy() - LR * g / 2)
            totals = [None] * members
    return models


def check_load_model_sum_partial_on_a_process_set(k, sgd, tmp_path, suffix):
    """op=Sum, passes, a compression object, sparse_as_dense, a local head,
    scale_local_gradients=False on the set {0, 1}: all come back from
    load_model, and the reloaded model trains on as one process replays it (on
    3 ranks rank 2 takes no part, so the set is what the reduction uses)."""
    ps = hvd.ProcessSet([0, 1])
    # The engine restarts with the set: first every rank leaves the previous
    # test (a peer still finishing a refused step would see it shut down).
    every_rank_here()
    tf_ring.shutdown()
    tf_ring.init(process_sets=[ps])
    try:
        if ps.included():
            settings = dict(compression=PlainCompression, op=hvd.Sum, backward_passes_per_step=2,
                            average_aggregated_gradients=True, sparse_as_dense=True,
                            scale_local_gradients=False, process_set=ps)
            x, y = _set_data(ps, 4, seed=31)
            xs, ys = _member_rows(x, ps.rank(), ps.size()), _member_rows(y, ps.rank(), ps.size())
            half = 2 * PER_RANK_BATCH
            model = make_partial_model(k, tf_ring.rank())
            model.compile(hvd.PartialDistributedOptimizer(sgd(LR), local_layers=[model.layers[-1]],
                                                          **settings), loss="mse")
            model.fit(xs[:half], ys[:half], batch_size=PER_RANK_BATCH, shuffle=False, verbose=0)
            path = str(tmp_path / ("partial_rank%d%s" % (tf_ring.rank(), suffix)))
            model.save(path)

            loaded = hvd.load_model(path, local_layers=[model.layers[-1].name], **settings)
            assert describe(loaded.optimizer, loaded) == describe(model.optimizer, model)
            assert describe(loaded.optimizer, loaded)["local"] == [(1, 0), (1, 1)]
            loaded.fit(xs[half:], ys[half:], batch_size=PER_RANK_BATCH, shuffle=False, verbose=0)
            replay = _replay_sum_partial(k, ps, x, y, 4)[ps.rank()]
            assert_weights_close(loaded.get_weights(), replay.get_weights())
            head = np.concatenate([w.ravel() for w in loaded.layers[-1].get_weights()])
            heads = hvd.allgather(tf.constant(head[None]), name="load_partial.heads",
                                  process_set=ps).numpy()
            assert np.abs(heads[0] - heads[1]).max() > 1e-3  # the heads stayed local
    finally:
        tf_ring.barrier(name="load_partial.done")
        tf_ring.shutdown()
        tf_ring.init()
        # Members built more Keras models than the rest, so Keras's layer names
        # (from which graph collective names come) differ across ranks until reset.
        k.backend.clear_session()


def check_load_model_average_with_predivide(k, sgd, tmp_path, suffix):
    """op=Average with gradient_predivide_factor, fp16 compression and groups
    on every rank: the settings come back, and training goes on in lockstep
    close to a one-process run on the global batches (fp16 rounds the sums)."""
    settings = dict(compression=hvd.Compression.fp16, gradient_predivide_factor=2.0, groups=2)
    x, y = global_data(4, seed=33)
    half = len(x) // 2
    model = make_model(k)
    model.compile(hvd.DistributedOptimizer(sgd(LR), **settings), loss="mse")
    model.fit(shard(x[:half]), shard(y[:half]), batch_size=PER_RANK_BATCH, shuffle=False, verbose=0)
    path = str(tmp_path / ("predivide_rank%d%s" % (hvd.rank(), suffix)))
    model.save(path)

    loaded = hvd.load_model(path, **settings)
    described = describe(loaded.optimizer, loaded)
    assert described == describe(model.optimizer, model)
    assert (described["prescale"], described["postscale"]) == (0.5, 2.0)
    reference = k.models.load_model(path)
    loaded.fit(shard(x[half:]), shard(y[half:]), batch_size=PER_RANK_BATCH, shuffle=False,
               verbose=0)
    reference.fit(x[half:], y[half:], batch_size=PER_RANK_BATCH * hvd.size(), shuffle=False,
                  verbose=0)
    assert_same_on_all_ranks(loaded.get_weights(), "load_predivide.weights")
    for got, want in zip(loaded.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-3)
    with pytest.raises(ValueError, match="'nope' not among its layers"):
        hvd.load_model(path, local_layers=["nope"])
