"""Checks of Compression.powersgd with tf_ring.keras, shared by
mpi_compression.py (Keras 3) and mpi_compression_tf_keras.py (tf_keras).
Each takes `k`, the Keras package under test."""
import numpy as np
import tensorflow as tf

import tf_ring.keras as hvd
from keras_cases import assert_same_on_all_ranks, gather_all

PER_RANK_BATCH = 16


def digits():
    """scikit-learn's digits as the examples use them: the same shuffled order
    on every rank, the last 20% held out, training cut to whole global batches."""
    from sklearn.datasets import load_digits
    data = load_digits()
    x = (data.data / 16.0).astype(np.float32)
    y = data.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(x))
    x, y = x[order], y[order]
    split = int(0.8 * len(x))
    usable = split - split % (PER_RANK_BATCH * hvd.size())
    return (x[:usable], y[:usable]), (x[split:], y[split:])


def my_rows(array):
    """This rank's PER_RANK_BATCH rows of every global batch."""
    per_batch = array.reshape((-1, hvd.size(), PER_RANK_BATCH) + array.shape[1:])
    return per_batch[:, hvd.rank()].reshape((-1,) + array.shape[1:])


def make_mlp(k):
    """64 -> 64 -> 10: both kernels pay at rank 2 (4096 vs 512, 640 vs 296 numbers)."""
    model = k.Sequential([k.Input((64,)), k.layers.Dense(64, activation="relu"),
                          k.layers.Dense(10)])
    rng = np.random.default_rng(0)
    model.set_weights([rng.normal(0, 0.15, w.shape).astype(np.float32) for w in
                       model.get_weights()])
    return model


def powersgd(start=10):
    return hvd.Compression.powersgd(rank=2, start_powerSGD_iter=start)


def fit_digits(k, make_optimizer, compression, epochs, steps=None, **compile_kwargs):
    """A fit of make_mlp on digits (`steps` batches only, when given)."""
    (x, y), (x_test, y_test) = digits()
    x, y = my_rows(x), my_rows(y)
    if steps:
        x, y = x[:steps * PER_RANK_BATCH], y[:steps * PER_RANK_BATCH]
    model = make_mlp(k)
    optimizer = hvd.DistributedOptimizer(make_optimizer(), compression=compression)
    model.compile(optimizer, loss=k.losses.SparseCategoricalCrossentropy(from_logits=True),
                  **compile_kwargs)
    model.fit(x, y, batch_size=PER_RANK_BATCH, epochs=epochs, shuffle=False, verbose=0)
    accuracy = float(np.mean(np.argmax(model.predict(x_test, verbose=0), 1) == y_test))
    return model, optimizer, accuracy


def state_of(optimizer):
    return optimizer._tf_ring_settings.powersgd.state


def check_digits_accuracy(k, make_optimizer, name, epochs=6):
    """PowerSGD at rank 2 ends within 1.5 points of uncompressed training in
    the same epochs, with every rank's weights equal."""
    plain, _, plain_accuracy = fit_digits(k, make_optimizer, hvd.Compression.none, epochs)
    model, optimizer, accuracy = fit_digits(k, make_optimizer, powersgd(), epochs)
    assert plain_accuracy > 0.9, plain_accuracy  # the comparison means something
    assert accuracy >= plain_accuracy - 0.015, (accuracy, plain_accuracy)
    assert_same_on_all_ranks(model.get_weights(), name + ".weights")
    # Both kernels were compressed, past the warm-up; Q is the same everywhere.
    state = state_of(optimizer)
    kernels = [w for w in model.trainable_weights if len(w.shape) == 2]
    assert all(state._slots[id(w)] is not None for w in kernels)
    assert int(optimizer.iterations.numpy()) > 10
    assert_same_on_all_ranks([state._slots[id(w)].q.numpy() for w in kernels], name + ".q")
    # The residual is each rank's own (what its gradients' approximation missed).
    residuals = gather_all([state._slots[id(kernels[0])].residual.numpy()], name + ".res")
    assert not np.array_equal(residuals[0], residuals[1])
    return model, optimizer


def check_checkpoint_and_elastic_state(k, make_optimizer, tmp_path, name):
    """tf.train.Checkpoint(optimizer=...) saves PowerSGD's state and restores
    it into a new optimizer; TensorFlowKerasState commits, restores and
    syncs it with the model's weights."""
    model, optimizer, _ = fit_digits(k, make_optimizer, powersgd(start=0), 1)
    saved = [v.numpy() for v in optimizer._tf_ring_settings.powersgd.variables]
    assert len(saved) == 4  # Q and residual of both kernels
    path = tf.train.Checkpoint(optimizer=optimizer).write(str(tmp_path / "ckpt"))
    fresh = hvd.DistributedOptimizer(make_optimizer(), compression=powersgd(start=0))
    tf.train.Checkpoint(optimizer=fresh).restore(path)
    restored = fresh._tf_ring_settings.powersgd
    restored.build(model.trainable_variables)  # restored as soon as the variables exist
    for got, want in zip(restored.variables, saved):
        np.testing.assert_array_equal(got.numpy(), want)

    from tf_ring.elastic.tf_state import TensorFlowKerasState
    state = TensorFlowKerasState(model, optimizer)
    state.commit()
    (x, y), _ = digits()
    model.train_on_batch(my_rows(x)[:PER_RANK_BATCH], my_rows(y)[:PER_RANK_BATCH])
    variables = optimizer._tf_ring_settings.powersgd.variables
    assert any(not np.array_equal(v.numpy(), s) for v, s in zip(variables, saved))
    state.restore()
    for v, s in zip(variables, saved):
        np.testing.assert_array_equal(v.numpy(), s)
    state.sync()  # every rank takes rank 0's state, residuals included
    assert_same_on_all_ranks([v.numpy() for v in variables], name + ".synced")
