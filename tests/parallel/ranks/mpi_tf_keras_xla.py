"""tf_keras with jit_compile=True: the same checks as mpi_keras_xla.py, with
the tf_keras optimizer and its legacy optimizer."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # before tf.keras is first touched
os.environ.setdefault("TF_RING_STALL_CHECK_TIME_SECONDS", "5")
os.environ.setdefault("TF_RING_STALL_SHUTDOWN_TIME_SECONDS", "30")

import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

import keras_cases  # noqa: E402
import keras_mixed_precision_cases as mixed  # noqa: E402
import keras_xla_cases as cases  # noqa: E402
import tf_ring.keras as hvd  # noqa: E402

SGD = tf_keras.optimizers.SGD
LEGACY_SGD = tf_keras.optimizers.legacy.SGD
OPTIMIZERS = pytest.mark.parametrize("sgd", [SGD, LEGACY_SGD], ids=["optimizer", "legacy"])


def test_tf_keras_is_the_active_keras():
    assert tf.keras.Model is tf_keras.Model


@OPTIMIZERS
@pytest.mark.parametrize("with_callbacks", [False, True], ids=["plain", "callbacks"])
def test_fit_keeps_xla_and_matches_fit_without_it(sgd, with_callbacks):
    cases.check_fit_keeps_xla(tf_keras, sgd, with_callbacks,
                              "tfk_xla_fit_%s_%s" % (sgd.__module__, with_callbacks))


@OPTIMIZERS
def test_fit_keeps_xla_with_compression_predivide_and_passes(sgd):
    cases.check_fit_keeps_xla_with_options(tf_keras, sgd, "tfk_xla_options_" + sgd.__module__)


def test_mixed_precision_overflow_on_one_rank_under_xla():
    mixed.check_overflow_on_one_rank(tf_keras, lambda: hvd.DistributedOptimizer(SGD(mixed.LR)),
                                     jit_compile=True)


@pytest.mark.parametrize("what", ["sync_bn", "adasum"])
def test_fit_with_sync_batch_norm_or_adasum(what):
    cases.check_fit_with_sync_batch_norm_or_adasum(tf_keras, SGD, what, "tfk_xla_" + what)


def test_mixed_precision_overflow_in_local_layer_under_xla():
    # Two collectives in the step: the gradients' group and the finite check's Min.
    mixed.check_overflow_in_local_layer(tf_keras, SGD, jit_compile=True)


def test_tape_in_jit_compiled_loop():
    cases.check_tape_in_jit_loop(tf_keras, "tfk_xla_tape")


def test_build_without_lowering_turns_xla_off_with_warning():
    cases.check_no_lowering_turns_xla_off(tf_keras, SGD)


def test_build_without_lowering_raises_without_callbacks():
    cases.check_no_lowering_without_callbacks_raises(tf_keras, SGD)


# Last: ranks outside the set build no models there, so Keras's layer-name
# counters, and with them the collectives' names in later graphs, would differ.
def test_fit_on_a_process_set_under_xla():
    keras_cases.check_fit_on_process_set(tf_keras, SGD, jit_compile=True)
