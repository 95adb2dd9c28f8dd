"""The wrapped optimizer's own math on sparse gradients (mpi_keras.py,
mpi_tf_keras.py, and one process in tests/unit/test_single_process.py).

An Embedding's gradient is a tf.IndexedSlices with one row per token, the
same row repeated when a token repeats. Keras's Adam applies it sparsely:
it squares each row before repeats add up, which the dense sum of those
rows cannot reproduce. So the trajectory of n ranks, each on 1/n of a
global batch, must follow a plain single-process Keras run on that global
batch with the same optimizer: the gathered rows are exactly the global
batch's rows. Each check also proves it can fail: the same reference fed
dense gradients ends measurably elsewhere.
"""
import numpy as np
import tensorflow as tf

import tf_ring.keras as hvd

STEPS = 30
LR = 1e-3
VOCAB, TOKENS, WIDTH = 20, 5, 4
PER_RANK = 4


def _global_data():
    rng = np.random.default_rng(21)
    rows = STEPS * PER_RANK * hvd.size()
    tokens = rng.integers(0, VOCAB, size=(rows, TOKENS)).astype(np.int32)
    targets = rng.normal(size=(rows, 1)).astype(np.float32)
    return tokens, targets


def _shard(array):
    """This rank's PER_RANK rows of every global batch (global batches are consecutive rows)."""
    steps = array.reshape((STEPS, hvd.size(), PER_RANK) + array.shape[1:])
    return steps[:, hvd.rank()].reshape((-1,) + array.shape[1:])


def _build(k):
    net = k.Sequential([k.Input((TOKENS,), dtype="int32"), k.layers.Embedding(VOCAB, WIDTH),
                        k.layers.Flatten(), k.layers.Dense(1)])
    rng = np.random.default_rng(0)
    net.set_weights([rng.normal(0, 0.5, w.shape).astype(np.float32) for w in net.get_weights()])
    return net


def _fit(k, make_optimizer, wrap, tokens, targets, batch):
    net = _build(k)
    optimizer = make_optimizer()
    net.compile(hvd.DistributedOptimizer(optimizer) if wrap else optimizer, loss="mse")
    net.fit(tokens, targets, batch_size=batch, shuffle=False, verbose=0)
    return net.get_weights()


def _loop(k, make_optimizer, wrap, tokens, targets, batch, densify=False):
    """A tf.function loop: plain GradientTape, then optimizer.apply_gradients."""
    net = _build(k)
    optimizer = make_optimizer()
    if wrap:
        optimizer = hvd.DistributedOptimizer(optimizer)
    loss_fn = k.losses.MeanSquaredError()

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, net(x, training=True))
        grads = tape.gradient(loss, net.trainable_variables)
        assert any(isinstance(g, tf.IndexedSlices) for g in grads)
        if densify:
            grads = [tf.convert_to_tensor(g) for g in grads]
        optimizer.apply_gradients(zip(grads, net.trainable_variables))

    for i in range(len(tokens) // batch):
        step(tokens[i * batch:(i + 1) * batch], targets[i * batch:(i + 1) * batch])
    return net.get_weights()


def check_sparse_adam_trajectory(k, make_optimizer, mode, dense_differs):
    """`STEPS` Adam steps through DistributedOptimizer on every rank end where
    plain Keras ends on the global batch, within float32 rounding, and every
    rank holds the same weights. mode: "fit" or "loop". dense_differs: this
    optimizer's sparse math differs from its dense math (Keras 3's Adam; not
    tf_keras's, which sums repeated rows first), so the check can be shown
    to have power."""
    tokens, targets = _global_data()
    train = {"fit": _fit, "loop": _loop}[mode]
    distributed = train(k, make_optimizer, True, _shard(tokens), _shard(targets), PER_RANK)
    reference = train(k, make_optimizer, False, tokens, targets, PER_RANK * hvd.size())
    for actual, expected in zip(distributed, reference):
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=2e-6)
    gathered = hvd.allgather(tf.constant(np.concatenate([w.ravel() for w in distributed])[None]),
                             name="sparse_trajectory_%s" % mode).numpy()
    for row in gathered[1:]:
        np.testing.assert_array_equal(row, gathered[0])
    # The check has power: the same run fed dense gradients ends elsewhere.
    dense = _loop(k, make_optimizer, False, tokens, targets, PER_RANK * hvd.size(), densify=True)
    apart = max(np.abs(a - b).max() for a, b in zip(dense, reference))
    assert apart > 1e-3 if dense_differs else apart < 1e-4, apart


def check_sparse_adam_under_loss_scaling(k, make_optimizer):
    """The same under mixed_float16 with a loss-scale optimizer, whose
    finiteness check sees the reduced gradients first
    (tf_ring/keras/_loss_scale.py): they stay sparse there too. The scale
    is fixed low enough that no step overflows: a dynamic scale would skip
    steps where the global batch's and the ranks' float16 gradients
    overflow differently, which is mixed precision, not tf_ring. Float16
    gradients of 1/n of a batch round differently from the whole batch's:
    a looser bound, still ten times below where dense gradients end."""
    def scaled(wrap):
        inner = make_optimizer()
        if wrap:
            inner = hvd.DistributedOptimizer(inner)
        if k.__name__ == "keras":  # Keras 3: dynamic only; it grows after 2000 steps
            return k.optimizers.LossScaleOptimizer(inner, initial_scale=128.0)
        return k.mixed_precision.LossScaleOptimizer(inner, dynamic=False, initial_scale=128.0)

    k.mixed_precision.set_global_policy("mixed_float16")
    try:
        tokens, targets = _global_data()
        runs = []
        for wrap, (x, y, batch) in ((True, (_shard(tokens), _shard(targets), PER_RANK)),
                                    (False, (tokens, targets, PER_RANK * hvd.size()))):
            net = _build(k)
            net.compile(scaled(wrap), loss="mse")
            net.fit(x, y, batch_size=batch, shuffle=False, verbose=0)
            runs.append(net.get_weights())
    finally:
        k.mixed_precision.set_global_policy("float32")
    for actual, expected in zip(*runs):
        np.testing.assert_allclose(actual, expected, rtol=0, atol=3e-4)
