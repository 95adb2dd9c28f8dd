"""Compression.bf16 and Compression.powersgd over real ranks (2 and 3), Keras 3:
bf16 on the wire eagerly, in tf.function and under XLA; PowerSGD's P, Q,
residuals and results against the NumPy reference (powersgd_reference.py)
computed on every rank from every rank's gradients, alone and through
DistributedGradientTape; Keras fit on digits within 1.5 points of
uncompressed, under XLA too; its state in checkpoints and elastic state;
bad settings fail on every rank alike. tf_keras: mpi_compression_tf_keras.py."""
import numpy as np
import pytest
import tensorflow as tf

import compression_cases as cases
import tf_ring as hvd
import tf_ring.keras as hvdk
from helpers import rank_input
from keras_cases import assert_same_on_all_ranks
from powersgd_reference import ReferencePowerSGD
from tf_ring.runtime.process_set import global_process_set
from tf_ring.training.gradient_reduction import Wire

MODES = {"eager": None, "graph": False, "xla": True}
# A Dense kernel, a Conv2D kernel (18 x 4), a bias and a 2 x 2 matrix (too small to pay).
SHAPES = [(12, 7), (3, 3, 2, 4), (7,), (2, 2)]


def powersgd_reduce(config, grads, variables, op=hvd.Average, name="tf_ring"):
    """grads reduced with config's state as the gradient reducer would (its seam)."""
    return config.reduce_gradients(grads, variables, Wire(op, 1.0, 1.0, global_process_set, name))


def run(mode, fn):
    """fn, eagerly or as a tf.function (XLA-compiled for "xla")."""
    if MODES[mode] is None:
        return fn
    return tf.function(fn, jit_compile=MODES[mode])


@pytest.mark.parametrize("mode", sorted(MODES))
def test_bf16_travels_as_bfloat16_with_float32_range(mode):
    # 1 + 2**-9 is not a bfloat16 number: it arrives as 1.0 only if it went as
    # bfloat16. 2**100 would be inf in float16.
    x = tf.constant([1.0 + 2.0 ** -9, 2.0 ** 100, 3.0], tf.float32)
    ints = tf.constant([7], tf.int32)

    def reduce(x, ints):
        one = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.bf16,
                            name="bf16_one_" + mode if mode == "eager" else None)
        group = hvd.grouped_allreduce([x, ints], op=hvd.Sum, compression=hvd.Compression.bf16,
                                      name="bf16_group_" + mode if mode == "eager" else None)
        return [one] + group

    one, grouped, grouped_ints = run(mode, reduce)(x, ints)
    want = [hvd.size() * 1.0, hvd.size() * 2.0 ** 100, hvd.size() * 3.0]
    for out in (one, grouped):
        assert out.dtype == tf.float32
        np.testing.assert_array_equal(out.numpy(), want)
    assert grouped_ints.dtype == tf.int32 and grouped_ints.numpy().tolist() == [7 * hvd.size()]


def _variables():
    return [tf.Variable(tf.zeros(s), name="psgd_v%d" % i) for i, s in enumerate(SHAPES)]


def _grads(rank, step):
    return [rank_input(rank, s, tf.float32, seed=10 * step + i, low=-1, high=1)
            for i, s in enumerate(SHAPES)]


def _gather(array, name):
    """Every rank's copy of `array`, stacked (allgather)."""
    return hvd.allgather(tf.constant(np.asarray(array)[None]), name=name).numpy()


@pytest.mark.parametrize("op", ["average", "sum"])
@pytest.mark.parametrize("mode", sorted(MODES))
def test_powersgd_matches_numpy_on_every_rank(mode, op):
    steps = 4
    reduce_op = {"average": hvd.Average, "sum": hvd.Sum}[op]
    variables = _variables()
    config = hvd.Compression.powersgd(rank=2, start_powerSGD_iter=1, min_compression_rate=1.0)
    config.state.build(variables)
    slots = [config.state._slots[id(v)] for v in variables]
    initial_q = [None if s is None else s.q.numpy() for s in slots]
    assert [q is not None for q in initial_q] == [True, True, False, False]
    for v, q in enumerate(initial_q[:2]):  # seeded: equal everywhere without a broadcast
        assert (_gather(q, "psgd_q0_%s_%s_%d" % (mode, op, v)) == q).all()

    def step(grads):
        return powersgd_reduce(config, grads, variables, op=reduce_op,
                               name="psgd_%s_%s" % (mode, op))
    step = run(mode, step)
    reference = ReferencePowerSGD(hvd.size(), initial_q, start_iter=1)
    factor = hvd.size() if op == "sum" else 1
    for s in range(steps):
        got = step([tf.constant(g) for g in _grads(hvd.rank(), s)])
        want = reference.step([_grads(r, s) for r in range(hvd.size())])
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.numpy(), w * factor, rtol=1e-4, atol=1e-5)
        if s >= 1:
            for v in (0, 1):  # the orthogonalized P: result = P Qᵀ, so P = result Q (QᵀQ)⁻¹
                q = slots[v].q.numpy().astype(np.float64)
                approx = got[v].numpy().reshape(-1, SHAPES[v][-1]) / factor
                np.testing.assert_allclose(approx @ q @ np.linalg.inv(q.T @ q),
                                           reference.last_p[v], rtol=1e-3, atol=1e-4)
    for v in (0, 1):
        q = slots[v].q.numpy()
        np.testing.assert_allclose(q, reference.q[v], rtol=1e-4, atol=1e-5)
        assert (_gather(q, "psgd_q_%s_%s_%d" % (mode, op, v)) == q).all()  # bitwise equal
        np.testing.assert_allclose(slots[v].residual.numpy(), reference.residual[hvd.rank()][v],
                                   rtol=1e-4, atol=1e-5)
    assert int(config.state.step.numpy()) == steps


def test_error_feedback_carries_the_residual():
    """The second step sends this step's gradient plus what the first step's
    approximation missed: with a zero second gradient, what arrives is the
    approximation of the mean residual, on every rank alike."""
    variables = _variables()[:1]
    config = hvd.Compression.powersgd(rank=1, start_powerSGD_iter=0, min_compression_rate=1.0)
    first = powersgd_reduce(config, [tf.constant(_grads(hvd.rank(), 0)[0])], variables,
                            name="psgd_feedback_0")[0]
    residual = config.state._slots[id(variables[0])].residual.numpy()
    residuals = _gather(residual, "psgd_feedback_residuals")
    mean = np.mean([_grads(r, 0)[0] for r in range(hvd.size())], axis=0)
    np.testing.assert_allclose(first.numpy() + residuals.mean(axis=0), mean, rtol=1e-4, atol=1e-5)
    second = powersgd_reduce(config, [tf.zeros(SHAPES[0])], variables,
                             name="psgd_feedback_1")[0].numpy()
    assert np.abs(second).max() > 1e-3  # the residual, not the zero gradient, was sent
    assert (_gather(second, "psgd_feedback_second") == second).all()


def test_bad_settings_fail_on_every_rank():
    with pytest.raises(ValueError, match="rank must be >= 1"):
        hvd.Compression.powersgd(rank=0)
    variables = _variables()
    with pytest.raises(ValueError, match="rank 13 is larger than the smaller side of every"):
        powersgd_reduce(hvd.Compression.powersgd(rank=13), [None] * 4, variables)
    with pytest.raises(ValueError, match="op=tf_ring.Average or tf_ring.Sum"):
        powersgd_reduce(hvd.Compression.powersgd(), [None] * 4, variables, op=hvd.Max)
    with pytest.raises(TypeError, match="pass it as compression= to DistributedOptimizer"):
        hvd.allreduce(tf.ones(3), compression=hvd.Compression.powersgd())
    # Every rank is still in step: a collective after the errors completes.
    assert hvd.allreduce(tf.ones(1), op=hvd.Sum, name="psgd_after_errors").numpy()[0] == hvd.size()


# --- DistributedGradientTape and tf_ring.keras.DistributedOptimizer ----------------------------

def test_tape_steps_match_numpy_from_every_ranks_gradients():
    """Real compressed steps: a model's gradients on this rank's data through
    DistributedGradientTape(compression=powersgd) in a tf.function, against
    the reference run on every rank's raw gradients (allgathered)."""
    import keras
    model = cases.make_mlp(keras)
    (x, y), _ = cases.digits()
    config = hvd.Compression.powersgd(rank=2, start_powerSGD_iter=1)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step(xb, yb):
        with tf.GradientTape(persistent=True) as tape:
            loss = loss_fn(yb, model(xb))
        raw = tape.gradient(loss, model.trainable_variables)
        reduced = hvd.DistributedGradientTape(tape, compression=config).gradient(
            loss, model.trainable_variables)
        return raw, reduced

    config.build(model.trainable_variables)
    slots = [config.state._slots[id(v)] for v in model.trainable_variables]
    assert [s is not None for s in slots] == [True, False, True, False]
    reference = ReferencePowerSGD(hvd.size(), [None if s is None else s.q.numpy() for s in slots],
                                  start_iter=1)
    rows = cases.my_rows(x), cases.my_rows(y)
    for s in range(3):
        batch = slice(s * cases.PER_RANK_BATCH, (s + 1) * cases.PER_RANK_BATCH)
        raw, reduced = step(rows[0][batch], rows[1][batch])
        every = [[g.numpy() for g in grads] for grads in
                 zip(*[hvd.allgather(g[None], name="psgd_tape_raw_%d_%d" % (s, i))
                       for i, g in enumerate(raw)])]
        want = reference.step(every)
        for got, w in zip(reduced, want):
            np.testing.assert_allclose(got.numpy(), w, rtol=1e-4, atol=1e-6)
    for v in (0, 2):
        np.testing.assert_allclose(slots[v].residual.numpy(), reference.residual[hvd.rank()][v],
                                   rtol=1e-4, atol=1e-6)


def test_fit_on_digits_matches_uncompressed_accuracy():
    import keras
    cases.check_digits_accuracy(keras, lambda: keras.optimizers.Adam(0.005), "psgd_k3")


def test_fit_under_xla_matches_fit_without_it():
    import keras
    make = lambda: keras.optimizers.SGD(0.1, momentum=0.9)  # noqa: E731
    # A few steps: XLA fuses differently, and the power iteration and the
    # momentum carry the rounding on, so a long run drifts apart.
    compiled, optimizer, _ = cases.fit_digits(keras, make, cases.powersgd(start=3), 1, steps=8,
                                              jit_compile=True)
    assert compiled.jit_compile is True and int(optimizer.iterations.numpy()) == 8
    plain, _, _ = cases.fit_digits(keras, make, cases.powersgd(start=3), 1, steps=8,
                                   jit_compile=False)
    for a, b in zip(compiled.get_weights(), plain.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)
    assert_same_on_all_ranks(compiled.get_weights(), "psgd_xla.weights")


def test_mixed_float16_residual_does_not_carry_the_loss_scale():
    """Under mixed_float16 the gradients reach PowerSGD loss-scaled. Its
    residual is added to later steps' gradients, so kept in scaled units it
    would count double after each halving of the scale (half after each
    growth): extra overflows and a lower final scale were measured. The same
    fit from two starting scales must leave the same residual (the scales
    are powers of two: unscaling is exact, bar float16's own rounding)."""
    import keras
    (x, y), _ = cases.digits()
    x, y = cases.my_rows(x)[:3 * cases.PER_RANK_BATCH], cases.my_rows(y)[:3 * cases.PER_RANK_BATCH]
    residuals = []
    for initial in (2.0 ** 15, 2.0 ** 5):
        keras.mixed_precision.set_global_policy("mixed_float16")
        try:
            model = cases.make_mlp(keras)
        finally:
            keras.mixed_precision.set_global_policy("float32")
        inner = hvdk.DistributedOptimizer(keras.optimizers.SGD(0.1),
                                          compression=cases.powersgd(start=0))
        optimizer = keras.optimizers.LossScaleOptimizer(inner, initial_scale=initial)
        model.compile(optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(x, y, batch_size=cases.PER_RANK_BATCH, epochs=1, shuffle=False, verbose=0)
        assert float(optimizer.dynamic_scale.numpy()) == initial  # no step overflowed
        state = cases.state_of(inner)
        residuals.append([state._slots[id(w)].residual.numpy() for w in model.trainable_weights
                          if len(w.shape) == 2])
    for high, low in zip(*residuals):
        assert np.abs(low).max() > 0
        np.testing.assert_allclose(high, low, rtol=0.05, atol=0.01 * np.abs(low).max())


def test_checkpoint_and_elastic_state(tmp_path):
    import keras
    cases.check_checkpoint_and_elastic_state(keras, lambda: keras.optimizers.SGD(0.1), tmp_path,
                                             "psgd_k3_state")


def test_optimizer_and_tape_refuse_what_powersgd_cannot_do():
    import keras
    with pytest.raises(TypeError, match=r"must be called with its settings"):
        hvdk.DistributedOptimizer(keras.optimizers.SGD(0.1), compression=hvd.Compression.powersgd)
    with pytest.raises(ValueError, match="op=tf_ring.Average or tf_ring.Sum"):
        hvdk.DistributedOptimizer(keras.optimizers.SGD(0.1), op=hvd.Adasum,
                                 compression=hvd.Compression.powersgd())
    with tf.GradientTape() as tape:
        pass
    with pytest.raises(ValueError, match="op=tf_ring.Average or tf_ring.Sum"):
        hvd.DistributedGradientTape(tape, op=hvd.Adasum, compression=hvd.Compression.powersgd())
    # A rank no kernel can take fails at the first step, on every rank alike.
    with pytest.raises(ValueError, match="rank 100 is larger than the smaller side of every"):
        cases.fit_digits(keras, lambda: keras.optimizers.SGD(0.1),
                         hvd.Compression.powersgd(rank=100), 1)
    assert hvd.allreduce(tf.ones(1), op=hvd.Sum, name="psgd_k3_after").numpy()[0] == hvd.size()


def test_v1_optimizer_in_a_graph_matches_numpy():
    """tf.compat.v1 DistributedOptimizer in a v1 graph and session: the state
    updates run although only the gradients are fetched."""
    raw_steps, reduced_steps = [], []
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        x = tf.compat.v1.placeholder(tf.float32, [None, 6])
        w1 = tf.Variable(rank_input(0, (6, 12), tf.float32, seed=70, low=-1, high=1), name="w1")
        w2 = tf.Variable(rank_input(0, (12, 4), tf.float32, seed=71, low=-1, high=1), name="w2")
        loss = tf.reduce_sum(tf.square(tf.matmul(tf.tanh(tf.matmul(x, w1)), w2)))
        config = hvd.Compression.powersgd(rank=2, start_powerSGD_iter=1, min_compression_rate=1.0)
        optimizer = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                             compression=config)
        reduced = [g for g, _ in optimizer.compute_gradients(loss, [w1, w2])]
        raw = tf.gradients(loss, [w1, w2])
        session.run(tf.compat.v1.global_variables_initializer())
        initial_q = session.run([config.state._slots[id(w)].q for w in (w1, w2)])
        for s in range(3):
            feed = {x: rank_input(hvd.rank(), (5, 6), tf.float32, seed=80 + s)}
            got_raw, got = session.run([raw, reduced], feed)
            raw_steps.append(got_raw)
            reduced_steps.append(got)
        residual = session.run(config.state._slots[id(w1)].residual)
    reference = ReferencePowerSGD(hvd.size(), initial_q, start_iter=1)
    for s in range(3):
        gathered = [hvd.allgather(tf.constant(g)[None], name="psgd_v1_%d_%d" % (s, i)).numpy()
                    for i, g in enumerate(raw_steps[s])]
        every = [[g[r] for g in gathered] for r in range(hvd.size())]
        for got, want in zip(reduced_steps[s], reference.step(every)):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(residual, reference.residual[hvd.rank()][0], rtol=1e-4, atol=1e-5)

def test_tape_state_in_a_checkpoint_and_elastic_state(tmp_path):
    """The tape's PowerSGD object (a tf.Module) is saved by tf.train.Checkpoint
    and restored into a fresh one; with its variables in TensorFlowState,
    restore() gives each rank its own committed residual back and sync()
    gives every rank rank 0's state."""
    from tf_ring.elastic.tf_state import TensorFlowState
    variables = _variables()
    config = hvd.Compression.powersgd(rank=2, start_powerSGD_iter=0, min_compression_rate=1.0)

    def step(s):
        return powersgd_reduce(config, [tf.constant(g) for g in _grads(hvd.rank(), s)], variables,
                               name="psgd_tape_state_%d" % s)
    step(0)
    saved = [v.numpy() for v in config.variables]
    assert len(saved) == 1 + 2 * 2  # the step counter, then Q and residual of both kernels
    path = tf.train.Checkpoint(powersgd=config).write(str(tmp_path / "ckpt"))
    fresh = hvd.Compression.powersgd(rank=2, start_powerSGD_iter=0, min_compression_rate=1.0)
    fresh.build(variables)
    assert any(not np.array_equal(v.numpy(), s) for v, s in zip(fresh.variables, saved))
    tf.train.Checkpoint(powersgd=fresh).read(path).assert_consumed()
    for got, want in zip(fresh.variables, saved):
        np.testing.assert_array_equal(got.numpy(), want)

    state = TensorFlowState(variables + list(config.variables))
    state.commit()
    step(1)
    assert any(not np.array_equal(v.numpy(), s) for v, s in zip(config.variables, saved))
    state.restore()
    for v, s in zip(config.variables, saved):
        np.testing.assert_array_equal(v.numpy(), s)
    residual = config.state._slots[id(variables[0])].residual
    assert not (_gather(residual.numpy(), "psgd_tape_state_res") == residual.numpy()).all()
    state.sync()
    for i, v in enumerate(config.variables):
        assert (_gather(v.numpy(), "psgd_tape_state_sync_%d" % i) == v.numpy()).all()
