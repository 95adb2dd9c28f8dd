"""XLA (jit_compile=True) checks shared by mpi_keras_xla.py (Keras 3) and
mpi_tf_keras_xla.py (tf_keras).

A fit with jit_compile=True must keep XLA on, trace the train step (and the
gradients' allreduce in it) inside the XLA context, end with equal weights on
every rank, and land where the same fit without XLA and a single process on
the global batch land. A build without the lowering (simulated here) keeps
the old behaviour: XLA off with a warning, or a clear error.
"""
import contextlib
import warnings

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.ops import control_flow_util

import tf_ring
import tf_ring.keras as hvd
from keras_cases import (FEATURES, LR, PER_RANK_BATCH, assert_same_on_all_ranks,
                         assert_weights_close, assert_weights_differ, global_data, make_model,
                         shard)
from tf_ring.keras import _xla


def _in_xla_context():
    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def _record_xla_tracing(model):
    """Wraps the model's train_step (an instance attribute wins over the class's)
    so each trace records whether it happened inside an XLA-compiled function."""
    traces = []
    original = model.train_step

    def train_step(data):
        traces.append(_in_xla_context())
        return original(data)

    model.train_step = train_step
    return traces


def _xla_warnings(caught):
    return [str(w.message) for w in caught if "XLA" in str(w.message)]


def _fit(k, make_optimizer, x, y, jit, callbacks=(), record=False):
    model = make_model(k)
    model.compile(make_optimizer(), loss="mse", jit_compile=jit)
    traces = _record_xla_tracing(model) if record else None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(shard(x), shard(y), batch_size=PER_RANK_BATCH, shuffle=False, verbose=0,
                  callbacks=list(callbacks))
    return model, traces, _xla_warnings(caught)


def _reference(k, sgd, x, y):
    reference = make_model(k)
    reference.compile(sgd(LR), loss="mse")
    reference.fit(x, y, batch_size=PER_RANK_BATCH * hvd.size(), shuffle=False, verbose=0)
    return reference.get_weights()


def train_step_hlo(model, x, y):
    """HLO of the model's train step compiled with XLA (lowered, not run)."""
    step = tf.function(model.train_step, jit_compile=True)
    return step.experimental_get_compiler_ir((tf.constant(x), tf.constant(y)))(stage="hlo")


def check_fit_keeps_xla(k, sgd, with_callbacks, name, steps=3):
    if not tf_ring._xla_support:
        pytest.fail("this build has no XLA lowering; the Keras XLA tests need it")
    x, y = global_data(steps, seed=21)
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                 hvd.callbacks.MetricAverageCallback()] if with_callbacks else []
    compiled, traces, warned = _fit(
        k, lambda: hvd.DistributedOptimizer(sgd(LR)), x, y, True, callbacks, record=True)
    # (a) XLA stayed on, and the step that fit ran was traced for XLA.
    assert warned == []
    assert compiled.jit_compile is True
    assert traces and all(traces), traces
    hlo = train_step_hlo(compiled, shard(x)[:PER_RANK_BATCH], shard(y)[:PER_RANK_BATCH])
    # One grouped call for all four gradients (separate blocking calls would not fuse).
    assert hlo.count('custom_call_target="tf_ring_collective"') == 1, hlo
    # (b) every rank ends with the same weights.
    assert_same_on_all_ranks(compiled.get_weights(), name + ".weights")
    # (c) the same fit without XLA, and one process on the global batch, agree.
    plain, _, _ = _fit(k, lambda: hvd.DistributedOptimizer(sgd(LR)), x, y, False, callbacks)
    assert not plain.jit_compile
    assert_weights_close(compiled.get_weights(), plain.get_weights())
    assert_weights_close(compiled.get_weights(), _reference(k, sgd, x, y))


def check_fit_keeps_xla_with_options(k, sgd, name, steps=4):
    """Options whose code runs in the compiled step: fp16 compression, Sum
    with a postscale (gradient_predivide_factor), backward_passes_per_step
    (allreduce inside a tf.cond)."""
    x, y = global_data(steps, seed=23)

    def make():
        return hvd.DistributedOptimizer(sgd(LR), compression=hvd.Compression.fp16,
                                        gradient_predivide_factor=2.0, backward_passes_per_step=2,
                                        average_aggregated_gradients=True)

    compiled, traces, warned = _fit(k, make, x, y, True, record=True)
    assert warned == [] and compiled.jit_compile is True and all(traces)
    assert_same_on_all_ranks(compiled.get_weights(), name + ".weights")
    plain, _, _ = _fit(k, make, x, y, False)
    for a, b in zip(compiled.get_weights(), plain.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)  # fp16 on the wire


def _sync_bn_model(k):
    model = k.Sequential([k.Input((FEATURES,)), k.layers.Dense(8),
                          hvd.SyncBatchNormalization(momentum=0.5), k.layers.Dense(3)])
    rng = np.random.default_rng(5)
    model.set_weights([rng.normal(0, 0.5, w.shape).astype(np.float32) for w in model.get_weights()])
    return model


def check_fit_with_sync_batch_norm_or_adasum(k, sgd, what, name, steps=3):
    """Collectives beyond the gradients' group inside the compiled step: a
    SyncBatchNormalization layer (a forward allreduce and its gradient's), or
    op=Adasum. XLA on and off must agree, and every rank end alike."""
    x, y = global_data(steps, seed=27)
    build = (lambda: _sync_bn_model(k)) if what == "sync_bn" else (lambda: make_model(k))
    options = {"op": hvd.Adasum} if what == "adasum" else {}
    if what == "adasum" and hvd.size() & (hvd.size() - 1):
        # As without XLA: Adasum needs a power-of-two number of ranks.
        with pytest.raises(NotImplementedError, match="power-of-two"):
            model = build()
            model.compile(hvd.DistributedOptimizer(sgd(LR), **options), loss="mse",
                          jit_compile=True)
            model.fit(shard(x), shard(y), batch_size=PER_RANK_BATCH, verbose=0)
        return
    weights = {}
    for jit in (True, False):
        model = build()
        model.compile(hvd.DistributedOptimizer(sgd(LR), **options), loss="mse", jit_compile=jit)
        traces = _record_xla_tracing(model)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.fit(shard(x), shard(y), batch_size=PER_RANK_BATCH, shuffle=False, verbose=0)
        assert _xla_warnings(caught) == [] and bool(model.jit_compile) is jit
        assert traces and all(t is jit for t in traces), traces
        weights[jit] = model.get_weights()
    assert_same_on_all_ranks(weights[True], name + ".weights")
    assert_weights_close(weights[True], weights[False])
    assert_weights_differ(weights[True], build().get_weights())


def check_tape_in_jit_loop(k, name, steps=4):
    """DistributedGradientTape in a user's tf.function(jit_compile=True) step,
    a few steps: equal on every rank and equal to one process on the global batch."""
    x, y = global_data(steps, seed=25)
    model, reference = make_model(k), make_model(k)
    loss_fn = k.losses.MeanSquaredError()

    def make_step(net, distributed):
        @tf.function(jit_compile=True)
        def step(xb, yb):
            with tf.GradientTape() as tape:
                loss = loss_fn(yb, net(xb, training=True))
            if distributed:
                tape = tf_ring.DistributedGradientTape(tape)
            grads = tape.gradient(loss, net.trainable_variables)
            for var, grad in zip(net.trainable_variables, grads):
                var.assign_sub(LR * grad)
        return step

    step, reference_step = make_step(model, True), make_step(reference, False)
    xs, ys = shard(x), shard(y)
    rows = PER_RANK_BATCH * hvd.size()
    for i in range(steps):
        batch = slice(i * PER_RANK_BATCH, (i + 1) * PER_RANK_BATCH)
        step(tf.constant(xs[batch]), tf.constant(ys[batch]))
        reference_step(tf.constant(x[i * rows:(i + 1) * rows]), tf.constant(y[i * rows:(i + 1) * rows]))
    hlo = step.experimental_get_compiler_ir(tf.constant(xs[:PER_RANK_BATCH]),
                                            tf.constant(ys[:PER_RANK_BATCH]))(stage="hlo")
    assert "tf_ring_collective" in hlo
    assert_same_on_all_ranks(model.get_weights(), name + ".weights")
    assert_weights_close(model.get_weights(), reference.get_weights())


@contextlib.contextmanager
def without_lowering():
    """What a build without cc/xla_ops/ does (tf_ring._xla_support False)."""
    original = _xla.lowering_built
    _xla.lowering_built = lambda: False
    try:
        yield
    finally:
        _xla.lowering_built = original


def check_no_lowering_turns_xla_off(k, sgd):
    x, y = global_data(2)
    with without_lowering():
        model, _, warned = _fit(k, lambda: hvd.DistributedOptimizer(sgd(LR)), x, y, True,
                                [hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    assert len(warned) == 1 and "turning off XLA" in warned[0] and "_xla_support" in warned[0]
    assert not model.jit_compile
    assert_weights_close(model.get_weights(), _reference(k, sgd, x, y))


def check_no_lowering_without_callbacks_raises(k, sgd):
    x, y = global_data(2)
    model = make_model(k)
    model.compile(hvd.DistributedOptimizer(sgd(LR)), loss="mse", jit_compile=True)
    with without_lowering(), pytest.raises(Exception, match="jit_compile=False"):
        model.fit(shard(x), shard(y), batch_size=PER_RANK_BATCH, shuffle=False, verbose=0)
