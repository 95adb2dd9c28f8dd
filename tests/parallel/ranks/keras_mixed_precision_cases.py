"""Mixed precision (mixed_float16) checks shared by mpi_keras_mixed_precision.py
(Keras 3) and mpi_tf_keras_mixed_precision.py (tf_keras).

Under the mixed_float16 policy model.compile wraps the optimizer in Keras's
LossScaleOptimizer, which skips a step whose gradients are not finite. Rank
1's first batch is blown up so that only its float16 gradients overflow at the
starting loss scale (2**15): every rank must skip that step together, halve
the loss scale alike, and end where a one-process replay of the loss-scale
rules over every rank's batches ends.
"""
import numpy as np
import tensorflow as tf

import tf_ring.keras as hvd
from keras_cases import FEATURES, LR, PER_RANK_BATCH, assert_same_on_all_ranks, gather_all, shard

STEPS = 5
BLOW_UP = 300.0
INITIAL_SCALE = 2.0 ** 15


def make_mixed_model(k):
    """float16 hidden layer, float32 output (as Keras's guide advises); the
    policy is set only while the model is made, which fixes it for the model."""
    policy = k.mixed_precision.global_policy()
    k.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = k.Sequential([k.Input((FEATURES,)), k.layers.Dense(8, activation="tanh"),
                              k.layers.Dense(3, dtype="float32")])
    finally:
        k.mixed_precision.set_global_policy(policy)
    rng = np.random.default_rng(3)
    model.set_weights([rng.normal(0, 0.5, w.shape).astype(np.float32) for w in model.get_weights()])
    return model


def rank_data(x, y, rank):
    xs, ys = shard(x, rank).copy(), shard(y, rank).copy()
    if rank == 1:
        xs[:PER_RANK_BATCH] *= BLOW_UP
        ys[:PER_RANK_BATCH] *= BLOW_UP
    return xs, ys


def global_data():
    rng = np.random.default_rng(11)
    n = STEPS * PER_RANK_BATCH * hvd.size()
    return (rng.normal(size=(n, FEATURES)).astype(np.float32),
            rng.normal(size=(n, 3)).astype(np.float32))


def loss_scale(optimizer):
    scale = getattr(optimizer, "dynamic_scale", None)  # Keras 3
    if scale is None:
        scale = optimizer.loss_scale  # tf_keras
    return float(np.asarray(tf.convert_to_tensor(scale)))


def replay(k, x, y, passes):
    """One process replays the job: per step every rank's scaled gradient; if
    any is not finite the step is skipped and the scale halves, else the
    unscaled gradients averaged over ranks are summed over `passes` steps and
    applied. Returns (weights, scale, [finite per rank at step 0])."""
    model = make_mixed_model(k)
    variables = model.trainable_variables
    scale, total, counted, first = INITIAL_SCALE, None, 0, None
    for step in range(STEPS):
        grads = []
        for r in range(hvd.size()):
            xs, ys = rank_data(x, y, r)
            rows = slice(step * PER_RANK_BATCH, (step + 1) * PER_RANK_BATCH)
            with tf.GradientTape() as tape:
                pred = tf.cast(model(xs[rows], training=True), tf.float32)
                loss = tf.reduce_mean(tf.square(ys[rows] - pred)) * scale
            grads.append([g.numpy().astype(np.float64) for g in tape.gradient(loss, variables)])
        finite = [all(np.isfinite(g).all() for g in rank_grads) for rank_grads in grads]
        first = finite if first is None else first
        if not all(finite):
            scale /= 2
            continue
        mean = [sum(gs) / hvd.size() / scale for gs in zip(*grads)]
        total = mean if total is None else [a + b for a, b in zip(total, mean)]
        counted += 1
        if counted == passes:
            for var, g in zip(variables, total):
                var.assign(var.numpy() - LR * g)
            total, counted = None, 0
    return model.get_weights(), scale, first


def check_overflow_on_one_rank(k, make_optimizer, passes=1, jit_compile=False):
    """make_optimizer() -> what to pass to compile()."""
    x, y = global_data()
    model = make_mixed_model(k)
    model.compile(make_optimizer(), loss="mse", jit_compile=jit_compile)
    assert "LossScaleOptimizer" in type(model.optimizer).__name__
    xs, ys = rank_data(x, y, hvd.rank())
    model.fit(xs, ys, batch_size=PER_RANK_BATCH, shuffle=False, verbose=0)
    assert bool(model.jit_compile) is jit_compile  # nothing turned XLA off

    weights, scale, first = replay(k, x, y, passes)
    # The set-up does what it says: at step 0 only rank 1 overflows, later steps are finite.
    assert first == [r != 1 for r in range(hvd.size())]
    assert scale == INITIAL_SCALE / 2
    scales = gather_all([loss_scale(model.optimizer)], "mixed.scale")
    assert [float(s[0]) for s in scales] == [scale] * hvd.size()
    assert_same_on_all_ranks(model.get_weights(), "mixed.weights")
    for got, want in zip(model.get_weights(), weights):
        np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-4)
    assert max(np.abs(a - b).max() for a, b in zip(model.get_weights(),
                                                   make_mixed_model(k).get_weights())) > 1e-3


def check_overflow_in_local_layer(k, sgd, jit_compile=False):
    """The float16 layer is local (not reduced), the float32 output layer shared:
    rank 1's overflow is in gradients no other rank sees, yet every rank skips."""
    x, y = global_data()
    model = make_mixed_model(k)
    optimizer = hvd.PartialDistributedOptimizer(sgd(LR), local_layers=[model.layers[0]])
    model.compile(optimizer, loss="mse", jit_compile=jit_compile)
    xs, ys = rank_data(x, y, hvd.rank())
    model.fit(xs, ys, batch_size=PER_RANK_BATCH, shuffle=False, verbose=0)
    assert bool(model.jit_compile) is jit_compile  # nothing turned XLA off
    scales = gather_all([loss_scale(model.optimizer)], "mixed_local.scale")
    assert [float(s[0]) for s in scales] == [INITIAL_SCALE / 2] * hvd.size()
    assert_same_on_all_ranks(model.layers[-1].get_weights(), "mixed_local.shared")
    local = gather_all(model.layers[0].get_weights(), "mixed_local.local")
    assert np.abs(local[0] - local[1]).max() > 1e-3
