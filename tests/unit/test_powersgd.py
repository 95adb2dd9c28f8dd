"""PowerSGD's arithmetic and settings, in one process (no launcher): ranks
are threads that meet in a fake allreduce, and every result is compared with
the NumPy reference (tests/parallel/ranks/powersgd_reference.py). The real
collectives on 2 and 3 processes: tests/parallel/ranks/mpi_compression.py.
Also Compression.bf16's casts."""
import os
import sys
import threading

import numpy as np
import pytest
import tensorflow as tf

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "parallel", "ranks"))

from powersgd_reference import ReferencePowerSGD, orthonormal_columns  # noqa: E402
from tf_ring.training.compression import Compression  # noqa: E402
from tf_ring.training.powersgd_math import orthogonalize  # noqa: E402

# A Dense kernel, a Conv2D kernel (seen as 18 x 4), a bias, and a matrix too small to pay.
SHAPES = [(6, 5), (3, 3, 2, 4), (5,), (2, 2)]


class FakeRanks:
    """Threads as ranks: average() returns the mean of every thread's list,
    summed in rank order in float32, so every rank gets the same bits (as the
    engine gives them)."""

    def __init__(self, ranks):
        self.ranks = ranks
        self.barrier = threading.Barrier(ranks, timeout=60)
        self.deposits = [None] * ranks
        self.stages = []

    def average(self, rank, tensors, stage):
        self.deposits[rank] = [np.asarray(t) for t in tensors]
        self.barrier.wait()
        if rank == 0:
            self.stages.append((stage, [d.shape for d in self.deposits[0]]))
        mean = [sum(d[k] for d in self.deposits) / np.float32(self.ranks)
                for k in range(len(tensors))]
        self.barrier.wait()  # all have read before anyone deposits again
        return [tf.constant(m.astype(np.asarray(t).dtype)) for m, t in zip(mean, tensors)]


def variables(shapes=SHAPES):
    return [tf.Variable(tf.zeros(s), name="v%d" % i) for i, s in enumerate(shapes)]


def gradients(rank, step, shapes=SHAPES):
    rng = np.random.default_rng(100 * step + rank)
    return [rng.normal(size=s).astype(np.float32) for s in shapes]


def run_ranks(ranks, settings, steps, grads_of=None, shapes=SHAPES):
    """Runs `steps` reductions on `ranks` thread-ranks; returns per rank the
    list of results of each step and its PowerSGD object."""
    grads_of = grads_of or (lambda r, s: gradients(r, s, shapes))
    fake = FakeRanks(ranks)
    shared_vars = variables(shapes)
    configs = [Compression.powersgd(**settings) for _ in range(ranks)]
    outputs = [[] for _ in range(ranks)]
    initial_q = [None] * ranks
    errors = []

    def rank_main(r):
        try:
            state = configs[r].state
            state.build(shared_vars)
            initial_q[r] = [None if s is None or s.q is None else s.q.numpy()
                            for s in (state._slots[id(v)] for v in shared_vars)]

            def reduce(ts, stage):
                return fake.average(r, ts, stage)
            for step in range(steps):
                grads = [tf.constant(g) for g in grads_of(r, step)]
                outs = state.reduce(grads, shared_vars, reduce, reduce)
                outputs[r].append([o.numpy() for o in outs])
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)
            fake.barrier.abort()

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    if errors:
        raise errors[0]
    return outputs, configs, initial_q, fake, shared_vars


def slots_of(config, var):
    return config.state._slots[id(var)]


@pytest.mark.parametrize("ranks", [2, 3])
def test_steps_match_numpy_reference(ranks):
    settings = dict(rank=2, start_powerSGD_iter=1, min_compression_rate=1.0)
    outputs, configs, initial_q, fake, shared_vars = run_ranks(ranks, settings, steps=4)
    # Which gradients are compressed: the kernels; the bias and the 2x2 matrix are not.
    assert [q is not None for q in initial_q[0]] == [True, True, False, False]
    # The initial Q is seeded: the same on every rank without a broadcast.
    for r in range(1, ranks):
        for a, b in zip(initial_q[0], initial_q[r]):
            assert (a is None and b is None) or np.array_equal(a, b)
    reference = ReferencePowerSGD(ranks, initial_q[0], start_iter=1)
    for step in range(4):
        expected = reference.step([gradients(r, step) for r in range(ranks)])
        for r in range(ranks):
            for got, want in zip(outputs[r][step], expected):
                np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)
    for v, var in enumerate(shared_vars):
        if reference.q[v] is None:
            continue
        for r in range(ranks):
            slots = slots_of(configs[r], var)
            np.testing.assert_allclose(slots.q.numpy(), reference.q[v], rtol=2e-4, atol=2e-5)
            np.testing.assert_allclose(slots.residual.numpy(), reference.residual[r][v],
                                       rtol=2e-4, atol=2e-5)
            # Q is bitwise the same on every rank after each step.
            assert np.array_equal(slots.q.numpy(), slots_of(configs[0], var).q.numpy())
    # One warm-up allreduce, then per step one grouped P stage (with the
    # uncompressed bias and 2x2 matrix fused in) and one Q stage.
    assert [s for s, _ in fake.stages] == ["warmup"] + ["p", "q"] * 3
    assert fake.stages[1][1] == [(5,), (2, 2), (6, 2), (18, 2)]
    assert all(int(c.state.step.numpy()) == 4 for c in configs)


def test_error_feedback_sends_everything_in_the_end():
    """Summed over steps, what PowerSGD delivers plus the ranks' mean residual
    is exactly the sum of the mean gradients: nothing is lost, only late."""
    ranks, steps = 2, 5
    outputs, configs, _, _, shared_vars = run_ranks(
        ranks, dict(rank=1, start_powerSGD_iter=0, min_compression_rate=1.5), steps)
    for v, var in enumerate(shared_vars[:2]):
        delivered = sum(outputs[0][s][v].astype(np.float64) for s in range(steps))
        sent = sum(np.mean([gradients(r, s)[v] for r in range(ranks)], axis=0)
                   for s in range(steps))
        pending = np.mean([slots_of(configs[r], var).residual.numpy() for r in range(ranks)],
                          axis=0).reshape(sent.shape)
        np.testing.assert_allclose(delivered + pending, sent, rtol=1e-4, atol=1e-4)
        assert np.abs(pending).max() > 1e-2  # rank 1 of a random matrix misses a lot


def test_without_error_feedback_or_warm_start():
    ranks = 2
    settings = dict(rank=1, start_powerSGD_iter=0, min_compression_rate=1.5,
                    use_error_feedback=False)
    outputs, configs, initial_q, _, shared_vars = run_ranks(ranks, settings, steps=3)
    assert slots_of(configs[0], shared_vars[0]).residual is None
    reference = ReferencePowerSGD(ranks, initial_q[0], use_error_feedback=False)
    for step in range(3):
        expected = reference.step([gradients(r, step) for r in range(ranks)])
        for got, want in zip(outputs[0][step], expected):
            np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)
    # Without warm start Q is drawn afresh each step; at full rank (rank 5 of a
    # 6 x 5 matrix) the approximation is exact whatever Q is.
    outputs, configs, initial_q, _, _ = run_ranks(
        ranks, dict(rank=5, start_powerSGD_iter=0, min_compression_rate=0.0, warm_start=False,
                    use_error_feedback=False), steps=2, shapes=SHAPES[:1])
    assert initial_q[0][0] is None
    for step in range(2):
        mean = np.mean([gradients(r, step)[0] for r in range(ranks)], axis=0)
        np.testing.assert_allclose(outputs[0][step][0], mean, rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(outputs[0][step][0], outputs[1][step][0])


def test_a_non_finite_gradient_leaves_the_state_as_it_was():
    def grads_of(rank, step):
        grads = gradients(rank, step)
        if step == 1 and rank == 1:
            grads[0][2, 3] = np.inf
        return grads
    outputs, configs, initial_q, _, shared_vars = run_ranks(
        2, dict(rank=1, start_powerSGD_iter=0, min_compression_rate=1.5), 3, grads_of)
    # Step 1's result is non-finite on every rank (a loss-scale optimizer skips it) ...
    assert all(not np.isfinite(outputs[r][1][0]).all() for r in range(2))
    # ... and step 2 is what PowerSGD gives from step 0's state, as if step 1
    # had not happened: worked out here in NumPy for the 6 x 5 kernel at rank 1
    # (M = G + e, P = mean(M Q), P made unit length, Q = mean(Mᵀ P), the
    # result P Qᵀ, the residual e = M - P Qᵀ).
    q = initial_q[0][0].astype(np.float64)
    residual = [np.zeros((6, 5)), np.zeros((6, 5))]
    for step in (0, 2):
        ms = [gradients(r, step)[0].astype(np.float64) + residual[r] for r in range(2)]
        p = np.mean([m @ q for m in ms], axis=0)
        p /= np.linalg.norm(p)
        q = np.mean([m.T @ p for m in ms], axis=0)
        approx = p @ q.T
        residual = [m - approx for m in ms]
    assert q.shape == (5, 1) and np.abs(residual[0]).max() > 1e-2  # a real rank-1 loss
    for r in range(2):
        np.testing.assert_allclose(outputs[r][2][0], approx, rtol=2e-4, atol=2e-5)
        slots = slots_of(configs[r], shared_vars[0])
        np.testing.assert_allclose(slots.q.numpy(), q, rtol=2e-4, atol=2e-5)
        np.testing.assert_allclose(slots.residual.numpy().reshape(6, 5), residual[r],
                                   rtol=2e-4, atol=2e-5)


def test_traced_and_xla_compiled_step_on_one_rank():
    """tf.cond between warm-up and compression, and the state's assignments,
    inside tf.function and under XLA; one rank, so the collectives are the
    identity and the reference runs with ranks=1."""
    for jit in (False, True):
        config = Compression.powersgd(rank=2, start_powerSGD_iter=2, min_compression_rate=1.0)
        shared_vars = variables()
        config.state.build(shared_vars)
        initial_q = [None if s is None else s.q.numpy()
                     for s in (slots_of(config, v) for v in shared_vars)]

        @tf.function(jit_compile=jit)
        def step(grads):
            return config.state.reduce(grads, shared_vars, lambda ts, _: list(ts),
                                       lambda ts, _: list(ts))
        reference = ReferencePowerSGD(1, initial_q, start_iter=2)
        for s in range(4):
            grads = gradients(0, s)
            got = step([tf.constant(g) for g in grads])
            for g, want in zip(got, reference.step([grads])):
                np.testing.assert_allclose(g.numpy(), want, rtol=2e-4, atol=2e-5)
        np.testing.assert_allclose(slots_of(config, shared_vars[0]).residual.numpy(),
                                   reference.residual[0][0], rtol=2e-4, atol=2e-5)


def test_orthogonalize_matches_qr_and_keeps_zero_columns():
    p = np.random.default_rng(3).normal(size=(20, 4))
    got = orthogonalize(tf.constant(p)).numpy()
    np.testing.assert_allclose(got, orthonormal_columns(p), atol=1e-10)
    with_zero = orthogonalize(tf.zeros((5, 1))).numpy()
    assert np.array_equal(with_zero, np.zeros((5, 1)))
    col = np.array([[3.0], [4.0]])
    np.testing.assert_allclose(orthogonalize(tf.constant(col), 1.0).numpy(), col / 6.0)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(rank=0), ValueError, "rank must be >= 1"),
    (dict(rank=2.5), TypeError, "rank must be an integer"),
    (dict(rank=True), TypeError, "rank must be an integer"),
    (dict(rank="2"), TypeError, "rank must be an integer"),
    (dict(start_powerSGD_iter=-1), ValueError, "start_powerSGD_iter must be >= 0"),
    (dict(min_compression_rate=-1), ValueError, "min_compression_rate must be >= 0"),
    (dict(min_compression_rate=float("nan")), ValueError, "min_compression_rate must be >= 0"),
    (dict(use_error_feedback=1), TypeError, "use_error_feedback must be True or False"),
    (dict(orthogonalization_epsilon="small"), TypeError, "must be a number"),
    (dict(random_seed=-3), ValueError, "random_seed must be >= 0"),
    (dict(rank=2, matrix_approximation_rank=3), ValueError, "name the same setting"),
])
def test_bad_settings_fail_clearly(kwargs, error, match):
    with pytest.raises(error, match=match):
        Compression.powersgd(**kwargs)


def test_pytorch_name_of_the_rank_is_accepted():
    assert Compression.powersgd(matrix_approximation_rank=3).rank == 3


def test_a_rank_larger_than_the_matrices_fails_clearly():
    shared_vars = variables()
    with pytest.raises(ValueError, match=r"rank 19 is larger than the smaller side of every "
                                         r"matrix gradient; the largest, v0:0, is 6 x 5 "
                                         r"\(shape \[6, 5\]\). Use rank <= 5"):
        Compression.powersgd(rank=19).state.build(shared_vars)
    with pytest.raises(ValueError, match=r"rank 5 is larger than the smaller side \(4\) of the "
                                         r"gradient of v1:0, seen as a 18 x 4 matrix"):
        Compression.powersgd(rank=5, min_compression_rate=0).state.build(shared_vars)
    with pytest.warns(UserWarning, match="no gradient is large enough"):
        Compression.powersgd(rank=2, min_compression_rate=100).state.build(shared_vars)


def test_powersgd_refuses_a_plain_allreduce():
    with pytest.raises(TypeError, match="pass it as compression= to DistributedOptimizer"):
        Compression.powersgd().compress(tf.ones(3))


def test_state_is_a_checkpointable_module(tmp_path):
    config = Compression.powersgd(rank=1, start_powerSGD_iter=0, min_compression_rate=1.5)
    shared_vars = variables()
    config.state.reduce([tf.constant(g) for g in gradients(0, 0)], shared_vars,
                        lambda ts, _: list(ts), lambda ts, _: list(ts))
    assert len(config.variables) == 1 + 2 * 2  # the step counter, Q and residual of two kernels
    assert config.state.memory_bytes() == 4 * (5 * 1 + 30 + 4 * 1 + 72)
    path = tf.train.Checkpoint(powersgd=config).write(str(tmp_path / "ckpt"))
    fresh = Compression.powersgd(rank=1, start_powerSGD_iter=0, min_compression_rate=1.5)
    tf.train.Checkpoint(powersgd=fresh).restore(path)
    fresh.state.build(shared_vars)  # the restore is deferred until the variables exist
    for a, b in zip(config.variables, fresh.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_bf16_keeps_float32_range():
    big = tf.constant([1e6, -3e5, 1.5], tf.float32)
    wire, ctx = Compression.bf16.compress(big)
    assert wire.dtype == tf.bfloat16
    back = Compression.bf16.decompress(wire, ctx)
    assert back.dtype == tf.float32
    np.testing.assert_allclose(back.numpy(), big.numpy(), rtol=2 ** -8)
    fp16_back = Compression.fp16.decompress(*Compression.fp16.compress(big))
    assert np.isinf(fp16_back.numpy()[0])  # what bf16 avoids
    ints = tf.constant([1, 2], tf.int32)
    assert Compression.bf16.compress(ints) == (ints, None)


def test_a_copy_has_its_own_state_and_counts_with_its_clock():
    config = Compression.powersgd(rank=1, start_powerSGD_iter=3, min_compression_rate=1.5)
    iterations = tf.Variable(0, dtype=tf.int64)
    twin = config.copy(clock=lambda: iterations)
    assert twin.settings() == config.settings() and twin is not config
    shared_vars = variables()
    grads = [tf.constant(g) for g in gradients(0, 0)]

    def reduce():
        return twin.state.reduce(grads, shared_vars, lambda ts, _: list(ts), lambda ts, _: list(ts))
    assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(reduce(), grads))  # warm-up
    iterations.assign(3)
    assert not np.allclose(reduce()[0].numpy(), grads[0].numpy())  # rank 1: an approximation
    assert twin.state.step is None and config.variables == ()  # no counter of its own
    assert len(twin.variables) == 2 * 2
