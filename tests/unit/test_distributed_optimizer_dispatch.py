"""tf_ring.DistributedOptimizer picks the v1 wrapper for tf.compat.v1
optimizers and hands anything else to tf_ring.keras (single process)."""
import sys
import types

import pytest
import tensorflow as tf

import tf_ring
from tf_ring.training.optimizer_v1 import DistributedOptimizerV1


def test_v1_optimizer_gets_the_v1_wrapper():
    inner = tf.compat.v1.train.GradientDescentOptimizer(0.1)
    wrapped = tf_ring.DistributedOptimizer(inner, device_sparse="", backward_passes_per_step=1)
    assert isinstance(wrapped, DistributedOptimizerV1)
    assert wrapped.get_name() == "DistributedGradientDescentOptimizer"


def test_v1_wrapper_rejects_gradient_accumulation():
    with pytest.raises(ValueError, match="backward_passes_per_step=1"):
        tf_ring.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                     backward_passes_per_step=2)


def test_other_optimizers_are_delegated_to_tf_ring_keras(monkeypatch):
    calls = []
    fake = types.ModuleType("tf_ring.keras")
    fake.DistributedOptimizer = lambda opt, *a, **kw: calls.append((opt, a, kw)) or "wrapped"
    monkeypatch.setitem(sys.modules, "tf_ring.keras", fake)
    monkeypatch.setattr(tf_ring, "keras", fake, raising=False)
    keras_like = object()
    assert tf_ring.DistributedOptimizer(keras_like, name="x", op=tf_ring.Sum) == "wrapped"
    assert calls == [(keras_like, (), {"name": "x", "op": tf_ring.Sum})]


def test_missing_tf_ring_keras_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "tf_ring.keras", None)  # makes the import fail
    monkeypatch.delattr(tf_ring, "keras", raising=False)
    with pytest.raises(ImportError, match="not a tf.compat.v1.train.Optimizer.*tf_ring.keras"):
        tf_ring.DistributedOptimizer(object())
