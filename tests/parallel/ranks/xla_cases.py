"""Collectives inside tf.function(jit_compile=True) on every rank: each
result equals the non-XLA op's on the same inputs and a NumPy reference,
and the compiled HLO holds tf_ring's custom call (not a fallback).
Driven by tests/parallel/test_xla.py on 2 and 3 ranks, with
xla_agreement_cases.py (how compiled steps agree across ranks) in the
same launch."""

import numpy as np
import pytest
import tensorflow as tf

import tf_ring as hvd
from xla_inputs import all_inputs, block_of, rank_input

hvd.init()


def test_build_reports_xla_lowering():
    assert hvd._xla_support is True

DTYPES = [tf.float32, tf.float16, tf.bfloat16, tf.int32]


# Average of int32 is not a case: the non-XLA op refuses it too.
ALLREDUCE_CASES = [(d, op) for op in ["Sum", "Min", "Max", "Product", "Average"] for d in DTYPES
                   if not (op == "Average" and d == tf.int32)]


@pytest.mark.parametrize("dtype,op", ALLREDUCE_CASES, ids=lambda c: getattr(c, "name", c))
def test_allreduce_matches_eager_and_numpy(dtype, op):
    reduce_op = getattr(hvd, op)
    name = "xla.ar.%s.%s" % (op, dtype.name)
    compiled = tf.function(lambda x: hvd.allreduce(x, op=reduce_op, name=name), jit_compile=True)
    x = rank_input(dtype, hvd.rank())
    got = compiled(x)
    eager = hvd.allreduce(x, op=reduce_op, name=name + ".eager")
    stack = np.stack(all_inputs(dtype))
    want = {"Sum": stack.sum(0), "Min": stack.min(0), "Max": stack.max(0),
            "Product": stack.prod(0), "Average": stack.mean(0)}[op]
    np.testing.assert_allclose(got.numpy().astype(np.float64), eager.numpy().astype(np.float64))
    np.testing.assert_allclose(got.numpy().astype(np.float64), want, rtol=1e-2)


def test_prescale_postscale():
    f = tf.function(lambda x: hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5,
                                            postscale_factor=3.0, name="xla.scaled"),
                    jit_compile=True)
    want = np.stack(all_inputs(tf.float32)).sum(0) * 1.5
    np.testing.assert_allclose(f(rank_input(tf.float32, hvd.rank())).numpy(), want, rtol=1e-6)


def test_grouped_allreduce_and_broadcast():
    @tf.function(jit_compile=True)
    def step(a, b):
        g = hvd.grouped_allreduce([a, b], op=hvd.Sum, name="xla.group")
        return g, hvd.broadcast(b, root_rank=hvd.size() - 1, name="xla.bcast")

    a, b = rank_input(tf.float32, hvd.rank()), rank_input(tf.int32, hvd.rank(), (5,))
    (ga, gb), bc = step(a, b)
    np.testing.assert_allclose(ga.numpy(), np.stack(all_inputs(tf.float32)).sum(0))
    want_b = sum(rank_input(tf.int32, r, (5,)).numpy() for r in range(hvd.size()))
    np.testing.assert_array_equal(gb.numpy(), want_b)
    np.testing.assert_array_equal(bc.numpy(), rank_input(tf.int32, hvd.size() - 1, (5,)).numpy())
    hlo = step.experimental_get_compiler_ir(a, b)(stage="hlo")
    assert "tf_ring_collective" in hlo and "custom-call" in hlo


def test_fifty_compiled_steps_with_cache():
    f = tf.function(lambda x: hvd.allreduce(x, op=hvd.Sum, name="xla.loop"), jit_compile=True)
    x = rank_input(tf.float32, hvd.rank())
    want = np.stack(all_inputs(tf.float32)).sum(0)
    before = hvd.stats()["cache_hits"]
    for _ in range(50):
        np.testing.assert_allclose(f(x).numpy(), want)
    assert hvd.stats()["cache_hits"] - before >= 40


def test_grouped_step_fuses_like_non_xla():
    tensors = [rank_input(tf.float32, hvd.rank(), (i + 2,)) for i in range(6)]

    def run(jit):
        f = tf.function(lambda *t: hvd.grouped_allreduce(list(t), op=hvd.Sum,
                                                         name="xla.fuse.%s" % jit),
                        jit_compile=jit)
        f(*tensors)  # warm up (compile, cache)
        hvd.reset_stats()
        f(*tensors)
        return hvd.stats()["fused_batches"]

    assert run(True) == run(False) >= 1


def test_tape_step_inside_jit_keeps_weights_equal():
    w = tf.Variable(tf.ones((4, 1)))
    hvd.broadcast_variables([w], root_rank=0)

    @tf.function(jit_compile=True)
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w)))
        tape = hvd.DistributedGradientTape(tape)
        (g,) = tape.gradient(loss, [w])
        w.assign_sub(0.1 * g)
        return loss

    for _ in range(3):
        step(rank_input(tf.float32, hvd.rank(), (2, 4)))
    gathered = hvd.allgather(tf.reshape(w, (1, 4)), name="xla.tape.check").numpy()
    for row in gathered:
        np.testing.assert_allclose(row, gathered[0])


# The ops that move rows take int64 as well.
MOVE_DTYPES = DTYPES + [tf.int64]


def assert_compiled(fn, *args):
    """The collective really is tf_ring's custom call, not a fallback."""
    hlo = fn.experimental_get_compiler_ir(*args)(stage="hlo")
    assert "tf_ring_collective" in hlo and "custom-call" in hlo


def as_f64(t):
    return t.numpy().astype(np.float64)


@pytest.mark.parametrize("dtype", MOVE_DTYPES, ids=lambda d: d.name)
def test_allgather_matches_eager_and_numpy(dtype):
    name = "xla.ag.%s" % dtype.name
    f = tf.function(lambda x: hvd.allgather(x, name=name), jit_compile=True)
    x = rank_input(dtype, hvd.rank())
    got = f(x)
    assert got.shape == (3 * hvd.size(), 4)  # static: size x the local first dimension
    np.testing.assert_array_equal(as_f64(got), np.concatenate(all_inputs(dtype)))
    np.testing.assert_array_equal(as_f64(got), as_f64(hvd.allgather(x, name=name + ".eager")))
    assert_compiled(f, x)


def test_grouped_allgather_one_call():
    @tf.function(jit_compile=True)
    def step(a, b):
        return hvd.grouped_allgather([a, b], name="xla.gag")

    a, b = rank_input(tf.float32, hvd.rank()), rank_input(tf.int64, hvd.rank(), (2, 2, 3))
    ga, gb = step(a, b)
    np.testing.assert_array_equal(ga.numpy(), np.concatenate(all_inputs(tf.float32)))
    np.testing.assert_array_equal(
        gb.numpy(), np.concatenate([rank_input(tf.int64, r, (2, 2, 3)).numpy()
                                    for r in range(hvd.size())]))
    hlo = step.experimental_get_compiler_ir(a, b)(stage="hlo")
    assert hlo.count("custom_call_target=\"tf_ring_collective\"") == 1  # one call, one negotiation


def test_allgather_rank_dependent_first_dim_fails_on_every_rank():
    # Rank r brings r + 1 rows: XLA compiled size x (r + 1) rows on each rank.
    f = tf.function(lambda x: hvd.allgather(x, name="xla.ag.uneven"), jit_compile=True)
    x = rank_input(tf.float32, hvd.rank(), (hvd.rank() + 1, 2))
    dims = "; ".join("%d on rank %d" % (r + 1, r) for r in range(hvd.size()))
    with pytest.raises(tf.errors.InvalidArgumentError) as info:  # as outside XLA
        f(x)
    msg = str(info.value)
    assert "'xla.ag.uneven'" in msg and dims in msg, msg
    assert "Pad to a common first dimension, or call allgather outside jit_compile" in msg, msg
    # No rank is left behind: the next collective runs normally.
    np.testing.assert_allclose(hvd.allreduce(tf.ones(2), op=hvd.Sum, name="xla.ag.after").numpy(),
                               [hvd.size()] * 2)


RS_CASES = [(d, op, extra) for d in MOVE_DTYPES for op in ["Sum", "Average"] for extra in [0, 1]
            if not (op == "Average" and d.is_integer)]


@pytest.mark.parametrize("dtype,op,extra", RS_CASES, ids=lambda c: getattr(c, "name", str(c)))
def test_reducescatter_matches_eager_and_numpy(dtype, op, extra):
    # extra=1: the rows do not divide by the size (earlier ranks get one more).
    rows = 2 * hvd.size() + extra
    name = "xla.rs.%s.%s.%d" % (op, dtype.name, extra)
    reduce_op = getattr(hvd, op)
    f = tf.function(lambda x: hvd.reducescatter(x, op=reduce_op, name=name), jit_compile=True)
    x = rank_input(dtype, hvd.rank(), (rows, 3))
    got = f(x)
    stack = np.stack([rank_input(dtype, r, (rows, 3)).numpy().astype(np.float64)
                      for r in range(hvd.size())])
    full = stack.sum(0) if op == "Sum" else stack.mean(0)
    want = full[block_of(rows, hvd.rank(), hvd.size())]
    assert got.shape == want.shape
    np.testing.assert_allclose(as_f64(got), want, rtol=1e-2)
    np.testing.assert_array_equal(
        as_f64(got), as_f64(hvd.reducescatter(x, op=reduce_op, name=name + ".eager")))
    assert_compiled(f, x)


def test_grouped_reducescatter_one_call():
    @tf.function(jit_compile=True)
    def step(a, b):
        return hvd.grouped_reducescatter([a, b], op=hvd.Sum, name="xla.grs")

    shapes = [(hvd.size() + 1, 2), (2 * hvd.size(),)]
    a, b = rank_input(tf.float32, hvd.rank(), shapes[0]), rank_input(tf.int64, hvd.rank(), shapes[1])
    for got, dtype, shape in zip(step(a, b), [tf.float32, tf.int64], shapes):
        full = sum(rank_input(dtype, r, shape).numpy() for r in range(hvd.size()))
        np.testing.assert_array_equal(got.numpy(), full[block_of(shape[0], hvd.rank(), hvd.size())])
    hlo = step.experimental_get_compiler_ir(a, b)(stage="hlo")
    assert hlo.count("custom_call_target=\"tf_ring_collective\"") == 1


def alltoall_expected(dtype, shape):
    """Rank r gets block r of every rank's rows, in rank order (equal split)."""
    k = shape[0] // hvd.size()
    me = hvd.rank()
    return np.concatenate([rank_input(dtype, q, shape).numpy().astype(np.float64)[me * k:(me + 1) * k]
                           for q in range(hvd.size())])


@pytest.mark.parametrize("dtype", MOVE_DTYPES, ids=lambda d: d.name)
def test_alltoall_equal_split_matches_eager_and_numpy(dtype):
    shape = (2 * hvd.size(), 3)
    name = "xla.a2a.%s" % dtype.name
    f = tf.function(lambda x: hvd.alltoall(x, name=name), jit_compile=True)
    x = rank_input(dtype, hvd.rank(), shape)
    got = f(x)
    np.testing.assert_array_equal(as_f64(got), alltoall_expected(dtype, shape))
    np.testing.assert_array_equal(as_f64(got), as_f64(hvd.alltoall(x, name=name + ".eager")))
    assert_compiled(f, x)


def test_alltoall_constant_equal_splits_return_received_splits():
    shape = (hvd.size(), 2)
    f = tf.function(lambda x: hvd.alltoall(x, splits=[1] * hvd.size(), name="xla.a2a.splits"),
                    jit_compile=True)
    got, received = f(rank_input(tf.float32, hvd.rank(), shape))
    np.testing.assert_array_equal(got.numpy(), alltoall_expected(tf.float32, shape))
    np.testing.assert_array_equal(received.numpy(), [1] * hvd.size())


@pytest.mark.parametrize("case", ["indivisible", "uneven_splits", "runtime_splits"])
def test_alltoall_that_xla_cannot_size_fails_at_compile_time(case):
    name = "xla.a2a.bad.%s" % case
    rows = hvd.size() + 1 if case == "indivisible" else hvd.size()
    x = rank_input(tf.float32, hvd.rank(), (rows, 2))
    if case == "indivisible":
        f = tf.function(lambda x: hvd.alltoall(x, name=name), jit_compile=True)
        why = "first dimension %d does not divide by the %d ranks" % (rows, hvd.size())
    elif case == "uneven_splits":
        splits = [0] * (hvd.size() - 1) + [rows]
        f = tf.function(lambda x: hvd.alltoall(x, splits=splits, name=name), jit_compile=True)
        why = "are not an equal split of %d rows" % rows
    else:
        # Splits computed from the data: XLA cannot know them when compiling.
        f = tf.function(lambda x: hvd.alltoall(
            x, splits=tf.cast(tf.ones([hvd.size()]) * tf.reduce_min(x) * 0 + 1, tf.int32),
            name=name), jit_compile=True)
        why = "splits are computed at run time"
    with pytest.raises(tf.errors.OpError) as info:
        f(x)
    msg = str(info.value)
    assert "alltoall of tensor '%s'" % name in msg and why in msg, msg
    assert "outside jit_compile" in msg, msg


def rs_sum(x, name):
    return hvd.reducescatter(x, op=hvd.Sum, name=name)


GRAD_OPS = {
    "allgather": lambda x, name: hvd.allgather(x, name=name),
    "grouped_allgather": lambda x, name: hvd.grouped_allgather([x], name=name)[0],
    "reducescatter": rs_sum,
    "grouped_reducescatter": lambda x, name: hvd.grouped_reducescatter([x], op=hvd.Sum,
                                                                        name=name)[0],
    "alltoall": lambda x, name: hvd.alltoall(x, name=name),
}


def grad_input_rows(op):
    size = hvd.size()
    # reducescatter: uneven blocks, whose gradient gathers padded blocks.
    return {"allgather": 2, "grouped_allgather": 2, "alltoall": 2 * size}.get(op, 2 * size + 1)


def coefficients(shape, rank):
    return np.arange(np.prod(shape), dtype=np.float64).reshape(shape) + rank


def expected_grad(op, rows):
    """d/dx of sum(op(x) * coefficients(op(x).shape, rank)), from the rules in
    tf_ring/collectives/_gradients.py: allgather averages and keeps its rows, reducescatter
    (Sum) gathers every block times the size, alltoall sends rows back."""
    size, me = hvd.size(), hvd.rank()
    if op.endswith("allgather"):
        mean = np.mean([coefficients((rows * size, 3), q) for q in range(size)], axis=0)
        return mean[me * rows:(me + 1) * rows]
    if op.endswith("reducescatter"):
        return size * np.concatenate([coefficients((block_of(rows, q, size).stop -
                                                    block_of(rows, q, size).start, 3), q)
                                      for q in range(size)])
    k = rows // size
    return np.concatenate([coefficients((rows, 3), q)[me * k:(me + 1) * k] for q in range(size)])


@pytest.mark.parametrize("op", sorted(GRAD_OPS))
def test_gradient_compiles_and_matches_non_xla(op):
    def grad_fn(jit):
        def fn(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = GRAD_OPS[op](x, "xla.grad.%s.%s" % (op, jit))
                c = tf.reshape(tf.cast(tf.range(tf.size(y)), tf.float32), tf.shape(y))
                loss = tf.reduce_sum(y * (c + float(hvd.rank())))
            return tape.gradient(loss, x)
        return tf.function(fn, jit_compile=jit)

    rows = grad_input_rows(op)
    x = rank_input(tf.float32, hvd.rank(), (rows, 3))
    compiled = grad_fn(True)
    got = compiled(x)
    np.testing.assert_allclose(got.numpy(), expected_grad(op, rows), rtol=1e-6)
    np.testing.assert_allclose(got.numpy(), grad_fn(False)(x).numpy(), rtol=1e-6)
    assert_compiled(compiled, x)
