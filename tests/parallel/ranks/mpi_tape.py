"""DistributedGradientTape: ranks training on their shares of each batch end
with the weights that one process gets on the whole batch (plain SGD, so the
averaged gradient is the only thing that can make them agree). Each rank
computes that single-process reference itself."""
import numpy as np
import pytest
import tensorflow as tf

import tf_ring as hvd

BATCH = 12  # divisible by 2 and 3: every rank's share has the same size
STEPS = 4
LR = 0.1


def batches(seed=0):
    rng = np.random.default_rng(seed)
    for _ in range(STEPS):
        x = rng.normal(size=(BATCH, 5)).astype(np.float32)
        y = rng.normal(size=(BATCH, 1)).astype(np.float32)
        yield x, y


def my_share(array):
    share = BATCH // hvd.size()
    return array[hvd.rank() * share:(hvd.rank() + 1) * share]


def make_mlp_weights():
    rng = np.random.default_rng(123)
    return [tf.Variable(rng.normal(size=(5, 4)).astype(np.float32), name="w1"),
            tf.Variable(np.zeros(4, np.float32), name="b1"),
            tf.Variable(rng.normal(size=(4, 1)).astype(np.float32), name="w2"),
            tf.Variable(3.0, name="unused")]  # gets a None gradient


def mlp_loss(weights, x, y):
    w1, b1, w2, _ = weights
    pred = tf.matmul(tf.tanh(tf.matmul(x, w1) + b1), w2)
    return tf.reduce_mean(tf.square(pred - y))


def sgd(weights, grads):
    for var, grad in zip(weights, grads):
        if grad is None:
            continue
        if isinstance(grad, tf.IndexedSlices):
            var.scatter_sub(tf.IndexedSlices(grad.values * LR, grad.indices))
        else:
            var.assign_sub(grad * LR)


def train_reference(loss_fn, make_weights):
    weights = make_weights()
    for x, y in batches():
        with tf.GradientTape() as tape:
            loss = loss_fn(weights, x, y)
        sgd(weights, tape.gradient(loss, weights))
    return [w.numpy() for w in weights]


def assert_same_weights(actual, reference):
    for a, r in zip(actual, reference):
        np.testing.assert_allclose(a.numpy(), r, rtol=1e-5, atol=1e-6)


def distributed_step(weights, x, y, **tape_kwargs):
    with tf.GradientTape() as tape:
        loss = mlp_loss(weights, x, y)
    grads = hvd.DistributedGradientTape(tape, **tape_kwargs).gradient(loss, weights)
    sgd(weights, grads)
    return grads


def test_eager_tape_matches_single_process_on_whole_batch():
    weights = make_mlp_weights()
    for x, y in batches():
        grads = distributed_step(weights, my_share(x), my_share(y))
        assert grads[3] is None
    assert_same_weights(weights, train_reference(mlp_loss, make_mlp_weights))


def test_tf_function_tape_with_groups_matches_single_process():
    weights = make_mlp_weights()
    step = tf.function(lambda x, y: distributed_step(weights, x, y, num_groups=2))
    for x, y in batches():
        step(my_share(x), my_share(y))
    assert_same_weights(weights, train_reference(mlp_loss, make_mlp_weights))


class PerVariableCompressor:
    """A stateful compressor of the kind the gradient reducer lets take over
    (its reduce_gradients seam, for issue 50's PowerSGD): it keeps a count
    per variable, sends each gradient times that count and divides the sum
    back. Right only if it sees every shared gradient with its own variable."""

    def __init__(self):
        self.calls = {}
        self.seen = []

    def reduce_gradients(self, grads, variables, wire):
        self.seen.append([v.name for v in variables])
        factors = []
        for var in variables:
            self.calls[var.name] = self.calls.get(var.name, 0) + 1
            factors.append(float(self.calls[var.name] * (1 + len(factors))))
        sent = wire.allreduce([g * f for g, f in zip(grads, factors)])
        return [s / f for s, f in zip(sent, factors)]


def test_a_per_variable_compressor_reduces_through_the_reducer():
    weights = make_mlp_weights()
    compressor = PerVariableCompressor()
    for x, y in batches():
        grads = distributed_step(weights, my_share(x), my_share(y), compression=compressor)
        assert grads[3] is None  # None gradients never reach it
    assert_same_weights(weights, train_reference(mlp_loss, make_mlp_weights))
    assert compressor.seen == [["w1:0", "b1:0", "w2:0"]] * STEPS
    assert compressor.calls == {"w1:0": STEPS, "b1:0": STEPS, "w2:0": STEPS}


def test_tape_used_as_context_manager_and_persistent():
    weights = make_mlp_weights()
    x, y = next(batches())
    with hvd.DistributedGradientTape(tf.GradientTape(persistent=True)) as tape:
        loss = mlp_loss(weights, my_share(x), my_share(y))
    first = tape.gradient(loss, weights[:3])
    second = tape.gradient(loss, {"w2": weights[2]})
    with tf.GradientTape() as whole:
        whole_loss = mlp_loss(weights, x, y)
    expected = whole.gradient(whole_loss, weights[:3])
    for got, want in zip(first, expected):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(second["w2"].numpy(), expected[2].numpy(), rtol=1e-5, atol=1e-6)
    del tape


def test_sum_op_and_fp16_compression():
    weights = make_mlp_weights()
    x, y = next(batches())
    with tf.GradientTape() as tape:
        loss = mlp_loss(weights, my_share(x), my_share(y))
    summed = hvd.DistributedGradientTape(tape, op=hvd.Sum, compression=hvd.Compression.fp16,
                                         device_dense="/cpu:0", device_sparse="/cpu:0")
    grads = summed.gradient(loss, weights[:3])
    with tf.GradientTape() as whole:
        whole_loss = mlp_loss(weights, x, y)
    for got, want in zip(grads, whole.gradient(whole_loss, weights[:3])):
        assert got.dtype == tf.float32
        np.testing.assert_allclose(got.numpy(), want.numpy() * hvd.size(), rtol=5e-3, atol=5e-3)


VOCAB = 10


def make_embedding_weights():
    rng = np.random.default_rng(7)
    return [tf.Variable(rng.normal(size=(VOCAB, 3)).astype(np.float32), name="table"),
            tf.Variable(rng.normal(size=(3, 1)).astype(np.float32), name="dense")]


def embedding_loss(weights, ids, y):
    table, dense = weights
    return tf.reduce_mean(tf.square(tf.matmul(tf.gather(table, ids), dense) - y))


def embedding_batches():
    rng = np.random.default_rng(9)
    for _ in range(STEPS):
        # Repeated ids inside and across ranks exercise duplicate indices.
        yield rng.integers(0, VOCAB, size=BATCH), rng.normal(size=(BATCH, 1)).astype(np.float32)


@pytest.mark.parametrize("sparse_as_dense", [False, True], ids=["sparse", "dense"])
def test_embedding_sparse_and_dense_paths_match_single_process(sparse_as_dense):
    weights = make_embedding_weights()

    @tf.function
    def step(ids, y):
        with tf.GradientTape() as tape:
            loss = embedding_loss(weights, ids, y)
        grads = hvd.DistributedGradientTape(tape, sparse_as_dense=sparse_as_dense).gradient(
            loss, weights)
        assert isinstance(grads[0], tf.IndexedSlices) != sparse_as_dense
        sgd(weights, grads)

    for ids, y in embedding_batches():
        step(my_share(ids), my_share(y))

    reference = make_embedding_weights()
    for ids, y in embedding_batches():
        with tf.GradientTape() as tape:
            loss = embedding_loss(reference, ids, y)
        sgd(reference, tape.gradient(loss, reference))
    assert_same_weights(weights, [w.numpy() for w in reference])


def test_keras_layers_train_identically_on_every_rank():
    tf.keras.utils.set_random_seed(hvd.rank())  # different initial weights per rank
    layer = tf.keras.layers.Dense(2)
    layer.build((None, 5))
    hvd.broadcast_variables(layer.trainable_variables, root_rank=0)
    rng = np.random.default_rng(hvd.rank())
    for _ in range(3):
        x = rng.normal(size=(4, 5)).astype(np.float32)  # different data per rank
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(layer(x)))
        grads = hvd.DistributedGradientTape(tape).gradient(loss, layer.trainable_variables)
        for var, grad in zip(layer.trainable_variables, grads):
            var.assign_sub(LR * grad)
    mine = [v.numpy() for v in layer.trainable_variables]
    for other in hvd.allgather_object(mine, name="keras_weights"):
        for a, b in zip(mine, other):
            np.testing.assert_array_equal(a, b)


PASSES = 3


def micro_batches(count, seed=5):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        yield (rng.normal(size=(BATCH, 5)).astype(np.float32),
               rng.normal(size=(BATCH, 1)).astype(np.float32))


def accumulated_reference(count, average):
    """One process on whole micro-batches: the gradients of PASSES of them
    summed (divided by PASSES when average), then one SGD step."""
    weights = make_mlp_weights()
    sums = None
    for k, (x, y) in enumerate(micro_batches(count)):
        with tf.GradientTape() as tape:
            loss = mlp_loss(weights, x, y)
        grads = [None if g is None else g.numpy() for g in tape.gradient(loss, weights)]
        sums = grads if sums is None else [None if s is None else s + g
                                           for s, g in zip(sums, grads)]
        if (k + 1) % PASSES == 0:
            sgd(weights, [None if s is None else tf.constant(s / (PASSES if average else 1))
                          for s in sums])
            sums = None
    return [w.numpy() for w in weights]


@pytest.mark.parametrize("average", [False, True], ids=["sum", "average"])
@pytest.mark.parametrize("in_function", [False, True], ids=["eager", "function"])
def test_backward_passes_per_step_matches_single_process_accumulation(average, in_function):
    """A new tape and wrapper at every pass (as a loop writes it) keep one
    running sum; every PASSES-th gradient() reduces it, the others give zeros."""
    weights = make_mlp_weights()

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = mlp_loss(weights, x, y)
        dtape = hvd.DistributedGradientTape(tape, backward_passes_per_step=PASSES,
                                            average_aggregated_gradients=average)
        grads = dtape.gradient(loss, weights)
        if dtape.reduced_this_pass:
            sgd(weights, grads)
        return dtape.reduced_this_pass, grads

    if in_function:
        step = tf.function(step)
    flags = []
    for k, (x, y) in enumerate(micro_batches(2 * PASSES)):
        reduced, grads = step(my_share(x), my_share(y))
        flags.append(bool(reduced))
        assert grads[3] is None
        if not flags[-1]:
            for grad in grads[:3]:
                np.testing.assert_array_equal(grad.numpy(), np.zeros(grad.shape))
    assert flags == [False] * (PASSES - 1) + [True] + [False] * (PASSES - 1) + [True]
    assert_same_weights(weights, accumulated_reference(2 * PASSES, average))


def test_backward_passes_of_an_embedding_are_summed_dense():
    weights = make_embedding_weights()

    @tf.function
    def step(ids, y):
        with tf.GradientTape() as tape:
            loss = embedding_loss(weights, ids, y)
        dtape = hvd.DistributedGradientTape(tape, backward_passes_per_step=2)
        grads = dtape.gradient(loss, weights)
        if dtape.reduced_this_pass:
            sgd(weights, grads)

    for ids, y in embedding_batches():
        step(my_share(ids), my_share(y))

    reference = make_embedding_weights()
    sums = None
    for k, (ids, y) in enumerate(embedding_batches()):
        with tf.GradientTape() as tape:
            loss = embedding_loss(reference, ids, y)
        grads = [tf.convert_to_tensor(g) for g in tape.gradient(loss, reference)]
        sums = grads if sums is None else [s + g for s, g in zip(sums, grads)]
        if k % 2 == 1:
            sgd(reference, sums)
            sums = None
    assert_same_weights(weights, [w.numpy() for w in reference])


def test_backward_passes_per_step_must_be_a_positive_integer():
    with tf.GradientTape() as tape:
        pass
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="backward_passes_per_step must be an integer >= 1"):
            hvd.DistributedGradientTape(tape, backward_passes_per_step=bad)


def test_keras_module_has_the_custom_loop_helpers():
    """What scripts moving from horovod.tensorflow.keras reach for: the same
    objects as tf_ring's, working on every rank."""
    import tf_ring.keras as hvd_keras
    assert hvd_keras.DistributedGradientTape is hvd.DistributedGradientTape
    assert hvd_keras.barrier is hvd.barrier
    assert hvd_keras.broadcast_variables is hvd.broadcast_variables
    variable = tf.Variable([float(hvd.rank())] * 2)
    hvd_keras.broadcast_variables([variable], root_rank=hvd.size() - 1)
    np.testing.assert_array_equal(variable.numpy(), [hvd.size() - 1.0] * 2)
    hvd_keras.barrier()
    weights = make_mlp_weights()
    x, y = next(batches())
    with tf.GradientTape() as tape:
        loss = mlp_loss(weights, my_share(x), my_share(y))
    grads = hvd_keras.DistributedGradientTape(tape).gradient(loss, weights[:3])
    with tf.GradientTape() as whole:
        whole_loss = mlp_loss(weights, x, y)
    for got, want in zip(grads, whole.gradient(whole_loss, weights[:3])):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def test_wrapping_something_else_is_a_clear_error():
    with pytest.raises(TypeError, match="wraps a tf.GradientTape"):
        hvd.DistributedGradientTape(object())
