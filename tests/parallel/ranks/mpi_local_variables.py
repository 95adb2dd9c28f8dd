"""Local (not averaged) variables with the tape and the v1 optimizer, and
Horovod's deprecated-but-public tape arguments.

The model (keras_partial_cases.make_partial_model) has a shared first layer and a head
local to each rank; keras_partial_cases.replay_partial_training replays every rank in
one process (shared gradients averaged, heads trained on their own rank's
data), which the ranks' weights must match."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_cases as cases
import keras_partial_cases as partial_cases
import tf_ring as hvd

STEPS = 3


def train_with_tape(model, make_tape, x, y, in_function):
    loss_fn = keras.losses.MeanSquaredError()

    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        grads = make_tape(tape).gradient(loss, model.trainable_variables)
        for var, grad in zip(model.trainable_variables, grads):
            var.assign_sub(cases.LR * grad)

    if in_function:
        step = tf.function(step)
    xs, ys = cases.shard(x), cases.shard(y)
    rows = cases.PER_RANK_BATCH
    for i in range(STEPS):
        step(xs[i * rows:(i + 1) * rows], ys[i * rows:(i + 1) * rows])


@pytest.mark.parametrize("in_function", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("scale_local_gradients", [True, False])
def test_partial_tape_keeps_local_layer(in_function, scale_local_gradients):
    x, y = cases.global_data(STEPS, seed=31)
    model = partial_cases.make_partial_model(keras, hvd.rank())
    head = model.layers[-1]
    train_with_tape(model, lambda tape: hvd.PartialDistributedGradientTape(
        tape, local_layers=head, scale_local_gradients=scale_local_gradients), x, y, in_function)
    partial_cases.assert_partial_result(model, x, y, STEPS, scale_local_gradients,
                                "partial_tape_%s_%s" % (in_function, scale_local_gradients))


def test_register_local_source():
    x, y = cases.global_data(STEPS, seed=33)
    model = partial_cases.make_partial_model(keras, hvd.rank())

    def make_tape(tape):
        tape = hvd.DistributedGradientTape(tape, scale_local_gradients=False)
        for var in model.layers[-1].trainable_weights:
            tape.register_local_source(var)
        return tape

    train_with_tape(model, make_tape, x, y, in_function=True)
    partial_cases.assert_partial_result(model, x, y, STEPS, False, "register_local_source")


def test_without_local_layers_partial_tape_averages_everything():
    x, y = cases.global_data(STEPS, seed=35)
    model = cases.make_model(keras)
    train_with_tape(model, hvd.PartialDistributedGradientTape, x, y, in_function=False)
    reference = cases.make_model(keras)
    reference.compile(keras.optimizers.SGD(cases.LR), loss="mse")
    reference.fit(x, y, batch_size=cases.PER_RANK_BATCH * hvd.size(), shuffle=False, verbose=0)
    cases.assert_weights_close(model.get_weights(), reference.get_weights())


def loss_and_tape(x, w, b, c):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(tf.matmul(x, w) + b)) * c
    return loss, tape


def test_horovod_tape_arguments():
    """Horovod's arguments, positionally in Horovod's order: the predivide
    factor splits Average's division and groups by variables regroup the
    allreduces, so the gradients still equal the plain average over ranks."""
    rng = np.random.default_rng(7)
    xs = [rng.normal(size=(4, 3)).astype(np.float32) for _ in range(hvd.size())]
    w = tf.Variable(np.arange(6, dtype=np.float32).reshape(3, 2))
    b = tf.Variable(np.ones(2, np.float32))
    c = tf.Variable(np.float32(2.0))
    per_rank = []
    for x in xs:
        loss, tape = loss_and_tape(x, w, b, c)
        per_rank.append([g.numpy() for g in tape.gradient(loss, [w, b, c])])
    expected = [np.mean(parts, axis=0) for parts in zip(*per_rank)]

    loss, tape = loss_and_tape(xs[hvd.rank()], w, b, c)
    tape = hvd.DistributedGradientTape(tape, "", "", hvd.Compression.none, False, hvd.Average,
                                       4.0, 0, [[w, c]])
    for g, e in zip(tape.gradient(loss, [w, b, c], use_generic_names=True), expected):
        np.testing.assert_allclose(g.numpy(), e, rtol=1e-5)

    loss, tape = loss_and_tape(xs[hvd.rank()], w, b, c)
    with pytest.warns(DeprecationWarning, match="num_groups"):
        tape = hvd.DistributedGradientTape(tape, device_dense="/cpu:0", num_groups=2)
    for g, e in zip(tape.gradient(loss, [w, b, c]), expected):
        np.testing.assert_allclose(g.numpy(), e, rtol=1e-5)

    with pytest.raises(ValueError, match="gradient_predivide_factor"):
        hvd.DistributedGradientTape(tf.GradientTape(), op=hvd.Sum, gradient_predivide_factor=2.0)
    with pytest.raises(ValueError, match="local_layers"):
        hvd.PartialDistributedGradientTape(tf.GradientTape(), local_layers=[w])


def test_v1_optimizer_register_local_var():
    """compute_gradients: the shared variable's gradient is averaged, the local
    one is this rank's own divided by the size (scale_local_gradients)."""
    own = [np.float32(r + 1) for r in range(hvd.size())]
    with tf.Graph().as_default():
        shared = tf.compat.v1.Variable(np.float32(0.5))
        local = tf.compat.v1.Variable(np.float32(1.5))
        loss = own[hvd.rank()] * (shared * shared + 3.0 * local)
        optimizer = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                             gradient_predivide_factor=2.0)
        optimizer.register_local_var(local)
        grads = [g for g, _ in optimizer.compute_gradients(loss, [shared, local])]
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            shared_grad, local_grad = session.run(grads)
    np.testing.assert_allclose(shared_grad, np.mean(own) * 2 * 0.5, rtol=1e-6)
    np.testing.assert_allclose(local_grad, own[hvd.rank()] * 3.0 / hvd.size(), rtol=1e-6)


@pytest.mark.parametrize("in_function", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("scale_local_gradients", [True, False])
def test_get_local_and_global_gradients(in_function, scale_local_gradients):
    """Horovod's split of gradient(): (variable, gradient) pairs in source
    order, local sources first (own gradient, / size when scaled), the rest
    averaged over ranks; the same values gradient() gives on the same tape."""
    own = [np.float32(r + 1) for r in range(hvd.size())]
    shared = tf.Variable(np.float32(0.5), name="shared")
    local = tf.Variable(np.float32(1.5), name="local")
    other = tf.Variable(np.float32(-2.0), name="other")
    sources = [shared, local, other]
    names = []  # the pairs' variables, recorded while the step runs (or is traced)

    def split():
        with tf.GradientTape(persistent=True) as tape:
            loss = own[hvd.rank()] * (shared * shared + 3.0 * local + other * other * other)
        tape = hvd.DistributedGradientTape(tape, scale_local_gradients=scale_local_gradients)
        tape.register_local_source(local)
        full = tape.gradient(loss, sources)
        local_pairs, global_pairs = tape.get_local_and_global_gradients(loss, sources)
        names.append(([v.name for v, _ in local_pairs], [v.name for v, _ in global_pairs]))
        return full, [g for _, g in local_pairs], [g for _, g in global_pairs]

    if in_function:
        split = tf.function(split)
    full, local_grads, global_grads = split()
    assert names == [([local.name], [shared.name, other.name])]
    mean_own = np.mean(own)
    expected_local = own[hvd.rank()] * 3.0 / (hvd.size() if scale_local_gradients else 1)
    np.testing.assert_allclose(local_grads[0].numpy(), expected_local, rtol=1e-6)
    np.testing.assert_allclose([g.numpy() for g in global_grads],
                               [mean_own * 2 * 0.5, mean_own * 3 * 4.0], rtol=1e-6)
    np.testing.assert_allclose([g.numpy() for g in full],
                               [mean_own * 1.0, expected_local, mean_own * 12.0], rtol=1e-6)


def test_partial_tape_get_local_and_global_gradients_by_layer():
    """The Keras layers given as local_layers are the local half of the split."""
    x, _ = cases.global_data(1, seed=37)
    model = partial_cases.make_partial_model(keras, hvd.rank())
    head = model.layers[-1]
    xb = cases.shard(x)[:cases.PER_RANK_BATCH]
    with tf.GradientTape(persistent=True) as tape:
        loss = tf.reduce_sum(model(xb, training=True))
    plain = tape.gradient(loss, model.trainable_variables)
    tape = hvd.PartialDistributedGradientTape(tape, local_layers=[head])
    local_pairs, global_pairs = tape.get_local_and_global_gradients(
        loss, model.trainable_variables)
    head_ids = [id(v) for v in head.trainable_weights]
    assert [id(v) for v, _ in local_pairs] == head_ids
    assert len(global_pairs) == len(model.trainable_variables) - len(head_ids)
    plain_by_id = {id(v): g.numpy() for v, g in zip(model.trainable_variables, plain)}
    for var, grad in local_pairs:
        np.testing.assert_allclose(grad.numpy(), plain_by_id[id(var)] / hvd.size(), rtol=1e-6)
    every_rank = hvd.allgather_object([plain_by_id[id(v)] for v, _ in global_pairs])
    for i, (_, grad) in enumerate(global_pairs):
        expected = np.mean([per_rank[i] for per_rank in every_rank], axis=0)
        np.testing.assert_allclose(grad.numpy(), expected, rtol=1e-5, atol=1e-6)
