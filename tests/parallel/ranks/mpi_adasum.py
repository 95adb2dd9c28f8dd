"""op=Adasum: the adaptive summation of Maleki et al. (MLSys 2021), checked
against a NumPy reference of the pairwise rule applied as a tree (ranks 0+1,
2+3, then the two results...). On a rank count that is not a power of two
(the 3-rank run) every rank gets Horovod's NotImplementedError, and the
coordinator's error when the Python check is bypassed."""
import numpy as np
import pytest
import tensorflow as tf

import tf_ring as hvd
from tf_ring.runtime._library import OPS
from helpers import all_inputs


def power_of_two():
    return hvd.size() & (hvd.size() - 1) == 0


def adasum_pair(a, b):
    dot, na, nb = np.dot(a, b), np.dot(a, a), np.dot(b, b)
    ca = 1.0 - dot / (2.0 * na) if na > 0 else 1.0
    cb = 1.0 - dot / (2.0 * nb) if nb > 0 else 1.0
    return ca * a + cb * b


def adasum_reference(vectors):
    shape = np.shape(vectors[0])
    level = [np.asarray(v, np.float64).ravel() for v in vectors]
    while len(level) > 1:
        level = [adasum_pair(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0].reshape(shape)


def correlated_inputs(shape, dtype, seed):
    """A shared direction plus per-rank noise: the dot products are far from
    zero, so Adasum differs clearly from both Sum and Average."""
    shared = all_inputs(shape, tf.float64, seed=seed)[0]
    noise = all_inputs(shape, tf.float64, seed=seed + 1)
    np_dtype = dtype.as_numpy_dtype
    return [(shared + 0.5 * n).astype(np_dtype) for n in noise]


def expect_not_power_of_two(fn):
    with pytest.raises(NotImplementedError, match="power-of-two number of ranks.*has %d"
                       % hvd.size()):
        fn()


@pytest.mark.parametrize("dtype", [tf.float16, tf.float32, tf.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("shape", [(7,), (4, 5), (1,), (0,)], ids=["odd", "2d", "one", "empty"])
def test_adasum_matches_the_pairwise_tree(dtype, shape):
    inputs = correlated_inputs(shape, dtype, seed=100 + len(shape))
    run = lambda: hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=hvd.Adasum,  # noqa: E731
                                name="adasum_%s_%s" % (dtype.name, "x".join(map(str, shape))))
    if not power_of_two():
        expect_not_power_of_two(run)
        return
    out = run()
    assert out.dtype == dtype and out.shape == shape
    want = adasum_reference(inputs)
    tol = 2e-3 if dtype == tf.float16 else 1e-6
    np.testing.assert_allclose(out.numpy().astype(np.float64), want, rtol=tol, atol=tol)
    if np.prod(shape) > 1:  # the rule matters here: neither the sum nor the mean
        assert not np.allclose(want, np.sum(inputs, 0))
        assert not np.allclose(want, np.mean(inputs, 0))


def test_adasum_of_orthogonal_vectors_is_their_sum_and_of_equal_vectors_the_vector():
    if not power_of_two():
        expect_not_power_of_two(lambda: hvd.allreduce(tf.ones(2), op=hvd.Adasum))
        return
    orthogonal = np.eye(hvd.size(), dtype=np.float64)[hvd.rank()]
    out = hvd.allreduce(tf.constant(orthogonal), op=hvd.Adasum, name="adasum_orth")
    np.testing.assert_allclose(out.numpy(), np.ones(hvd.size()), rtol=1e-12)
    same = hvd.allreduce(tf.constant([3.0, -4.0]), op=hvd.Adasum, name="adasum_same")
    np.testing.assert_allclose(same.numpy(), [3.0, -4.0], rtol=1e-6)


def test_adasum_tensors_in_one_function_are_not_fused():
    # Fused, their dot products would mix; each must match its own reference.
    shapes = [(3,), (5,), (2, 2)]
    inputs = [correlated_inputs(s, tf.float32, seed=110 + i) for i, s in enumerate(shapes)]
    if not power_of_two():
        expect_not_power_of_two(lambda: hvd.allreduce(tf.ones(2), op=hvd.Adasum))
        return

    @tf.function
    def step(xs):
        return [hvd.allreduce(x, op=hvd.Adasum) for x in xs] + \
            hvd.grouped_allreduce([x * 2.0 for x in xs], op=hvd.Adasum)

    outs = step([tf.constant(x[hvd.rank()]) for x in inputs])
    for x, out in zip(inputs + inputs, outs[:3] + [o / 2.0 for o in outs[3:]]):
        np.testing.assert_allclose(out.numpy(), adasum_reference(x), rtol=1e-5, atol=1e-5)


def test_adasum_with_scale_factors():
    inputs = correlated_inputs((6,), tf.float64, seed=120)
    run = lambda: hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=hvd.Adasum,  # noqa: E731
                                prescale_factor=2.0, postscale_factor=0.25, name="adasum_scaled")
    if not power_of_two():
        expect_not_power_of_two(run)
        return
    # Adasum is scale-equivariant: scaling every input by 2 scales the result by 2.
    np.testing.assert_allclose(run().numpy(), adasum_reference(inputs) * 2.0 * 0.25, rtol=1e-9)


def test_distributed_gradient_tape_with_adasum():
    # loss_r = sum(w * x_r): the local gradient is x_r, the reduced one Adasum of them.
    inputs = correlated_inputs((4,), tf.float32, seed=130)
    w = tf.Variable(tf.zeros(4))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w * tf.constant(inputs[hvd.rank()]))
    tape = hvd.DistributedGradientTape(tape, op=hvd.Adasum)
    if not power_of_two():
        expect_not_power_of_two(lambda: tape.gradient(loss, [w]))
        return
    (grad,) = tape.gradient(loss, [w])
    np.testing.assert_allclose(grad.numpy(), adasum_reference(inputs), rtol=1e-5, atol=1e-6)


def test_adasum_rejects_integers_sparse_and_reducescatter():
    with pytest.raises(TypeError, match="op=Adasum.*int32 is not supported"):
        hvd.allreduce(tf.constant([1, 2]), op=hvd.Adasum)
    slices = tf.IndexedSlices(tf.ones((1, 2)), tf.constant([0]), tf.constant([2, 2]))
    with pytest.raises(NotImplementedError, match="not Adasum"):
        hvd.allreduce(slices, op=hvd.Adasum)
    with pytest.raises(NotImplementedError, match="allreduce only"):
        hvd.reducescatter(tf.ones((2, 2)), op=hvd.Adasum)


def test_coordinator_rejects_adasum_it_cannot_run():
    # Bypass the Python checks (as a graph built before init() would): the
    # coordinator refuses on every rank, with the reason.
    if power_of_two():
        fragment, tensor = "float16, float32 and float64, not bfloat16", tf.ones(2, tf.bfloat16)
    else:
        fragment, tensor = "power-of-two number of ranks, and this job has %d" % hvd.size(), \
            tf.ones(2)
    with pytest.raises(tf.errors.InvalidArgumentError, match=fragment):
        OPS.tf_ring_allreduce(tensor, reduce_op=hvd.Adasum, tensor_name="adasum_raw")


def test_keras_distributed_optimizer_passes_adasum_through():
    import keras
    import tf_ring.keras as hvd_keras
    inputs = correlated_inputs((4,), tf.float32, seed=140)
    var = keras.Variable(np.zeros(4, np.float32))
    opt = hvd_keras.DistributedOptimizer(keras.optimizers.SGD(1.0), op=hvd_keras.Adasum)
    step = lambda: opt.apply_gradients([(tf.constant(inputs[hvd.rank()]), var)])  # noqa: E731
    if not power_of_two():
        expect_not_power_of_two(step)
        return
    step()
    np.testing.assert_allclose(var.numpy(), -adasum_reference(inputs), rtol=1e-5, atol=1e-6)
