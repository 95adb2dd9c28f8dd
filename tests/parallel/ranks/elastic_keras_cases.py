"""Elastic checks shared by mpi_elastic_state.py (Keras 3) and
mpi_elastic_tf_keras.py (tf_keras). Each takes `k`, the Keras under test."""
import numpy as np
import tensorflow as tf

import tf_ring.keras as hvd

STEPS, EPOCHS, BATCH = 4, 3, 2


def gathered(values, name):
    """Every rank's values flattened into one row each (allgather)."""
    flat = np.concatenate([np.asarray(v, np.float64).ravel() for v in values])
    return hvd.allgather(tf.constant(flat[None]), name=name).numpy()


def optimizer_values(optimizer):
    variables = optimizer.variables
    return [v.numpy() for v in (variables() if callable(variables) else variables)]


def make_model(k, value):
    model = k.Sequential([k.Input((2,)), k.layers.Dense(2, activation="softmax")])
    model.set_weights([np.full((2, 2), value, np.float32), np.full(2, value, np.float32)])
    return model


def check_keras_state(k):
    """sync gives rank 0's weights, optimizer slots and attributes; restore
    goes back to the last commit, also after an optimizer step."""
    model = make_model(k, 1.0 + hvd.rank())
    optimizer = k.optimizers.Adam(0.1)
    optimizer.build(model.trainable_variables)
    for var in optimizer.variables if not callable(optimizer.variables) else optimizer.variables():
        var.assign(tf.cast(tf.fill(var.shape, 3 + hvd.rank()), var.dtype))
    state = hvd.elastic.KerasState(model, optimizer, batch=20 + hvd.rank(), epoch=10 + hvd.rank())
    state.sync()

    rows = gathered(model.get_weights() + optimizer_values(optimizer), "keras_state.synced")
    for row in rows:
        np.testing.assert_array_equal(row[:6], np.ones(6))  # rank 0's weights
        np.testing.assert_array_equal(row[6:], np.full(len(row) - 6, 3.0))  # rank 0's slots
    assert (state.batch, state.epoch) == (20, 10)
    synced = model.get_weights()
    synced_slots = optimizer_values(optimizer)

    model.set_weights([np.full((2, 2), 7.0, np.float32), np.zeros(2, np.float32)])
    state.batch, state.epoch = 21, 11
    state.restore()
    for got, want in zip(model.get_weights(), synced):
        np.testing.assert_array_equal(got, want)
    assert (state.batch, state.epoch) == (20, 10)

    # Commit after a real optimizer step, step again, restore twice.
    data = np.array([[1.0, -2.0]], np.float32), np.array([[0.0, 1.0]], np.float32)
    model.compile(optimizer, loss="mse")
    model.train_on_batch(*data)
    committed, committed_slots = model.get_weights(), optimizer_values(optimizer)
    assert any(np.abs(a - b).max() > 0 for a, b in zip(committed_slots, synced_slots))
    state.batch = 22
    state.commit()
    for _ in range(2):
        model.train_on_batch(*data)
        state.batch = 23
        state.restore()
        for got, want in zip(model.get_weights() + optimizer_values(optimizer),
                             committed + committed_slots):
            np.testing.assert_array_equal(got, want)
        assert state.batch == 22


def _fit_data():
    # Identical rows: every batch is the same, so a replayed batch and a
    # skipped one change nothing but the number of steps.
    x = np.tile(np.array([[0.5, -1.0]], np.float32), (STEPS * BATCH, 1))
    y = np.tile(np.array([[1.0, 0.0]], np.float32), (STEPS * BATCH, 1))
    return x, y


def _compiled(k):
    model = make_model(k, 0.25)
    model.compile(hvd.DistributedOptimizer(k.optimizers.Adam(0.05)), loss="mse")
    return model


_reference_weights = {}


def _uninterrupted_weights(k, x, y):
    if k.__name__ not in _reference_weights:  # one fit per Keras, shared by the checks
        reference = _compiled(k)
        reference.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
        _reference_weights[k.__name__] = reference.get_weights()
    return _reference_weights[k.__name__]


def check_fit_resumes(k, failure, relative_epochs):
    """fit() under run(): a lost rank (HorovodInternalError on every rank) or
    a host change (rank 0's notice) at epoch 1, batch 2 ends with the same
    weights and optimizer step count as an uninterrupted fit."""
    x, y = _fit_data()
    expected = _uninterrupted_weights(k, x, y)
    model = _compiled(k)
    state = hvd.elastic.KerasState(model, batch=0, epoch=0)
    ran, resets = [], []
    state.register_reset_callbacks([lambda: resets.append(hvd.size())])

    class Failure(k.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            ran.append((state.epoch, batch))
            if len(ran) != 7:
                return
            if failure == "lost_rank":
                raise hvd.elastic.HorovodInternalError("injected on every rank")
            if hvd.rank() == 0:
                state.on_hosts_updated(1.0, hvd.elastic.HostUpdateResult.added)

    callbacks = [Failure(), hvd.elastic.CommitStateCallback(state),
                 hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.UpdateEpochStateCallback(state)]

    @hvd.elastic.run
    def train(state):
        if relative_epochs:  # Horovod's examples: Keras numbers the epochs from 0
            model.fit(x, y, batch_size=BATCH, epochs=EPOCHS - state.epoch, shuffle=False,
                      verbose=0, callbacks=callbacks)
        else:
            model.fit(x, y, batch_size=BATCH, initial_epoch=state.epoch, epochs=EPOCHS,
                      shuffle=False, verbose=0, callbacks=callbacks)
        return state.epoch

    assert train(state) == EPOCHS
    assert resets == [hvd.size()]
    # The lost rank replays batch 2 of epoch 1 (its commit was before it);
    # the host change was noticed at the commit after it, so nothing repeats.
    assert len(ran) == EPOCHS * STEPS + (1 if failure == "lost_rank" else 0), ran
    assert int(model.optimizer.iterations.numpy()) == EPOCHS * STEPS
    for got, want in zip(model.get_weights(), expected):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert (state.epoch, state.batch) == (EPOCHS, 0)
    # The engine runs after the reset: a collective gives the right answer.
    total = hvd.allreduce(tf.constant([float(hvd.rank())]), op=hvd.Sum, name="after_reset")
    assert total.numpy()[0] == sum(range(hvd.size()))
