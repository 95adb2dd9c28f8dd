"""Keras 3 with jit_compile=True: the train step compiles with XLA, the
gradients' allreduce inside it (see keras_xla_cases.py)."""
import os

# A rank stuck in a compiled collective must fail the job, not hang it.
os.environ.setdefault("TF_RING_STALL_CHECK_TIME_SECONDS", "5")
os.environ.setdefault("TF_RING_STALL_SHUTDOWN_TIME_SECONDS", "30")

import keras  # noqa: E402
import pytest  # noqa: E402

import keras_cases  # noqa: E402
import keras_mixed_precision_cases as mixed  # noqa: E402
import keras_xla_cases as cases  # noqa: E402
import tf_ring.keras as hvd  # noqa: E402

SGD = keras.optimizers.SGD


@pytest.mark.parametrize("with_callbacks", [False, True], ids=["plain", "callbacks"])
def test_fit_keeps_xla_and_matches_fit_without_it(with_callbacks):
    cases.check_fit_keeps_xla(keras, SGD, with_callbacks, "k3_xla_fit_%s" % with_callbacks)


def test_fit_keeps_xla_with_compression_predivide_and_passes():
    cases.check_fit_keeps_xla_with_options(keras, SGD, "k3_xla_options")


def test_mixed_precision_overflow_on_one_rank_under_xla():
    mixed.check_overflow_on_one_rank(keras, lambda: hvd.DistributedOptimizer(SGD(mixed.LR)),
                                     jit_compile=True)


@pytest.mark.parametrize("what", ["sync_bn", "adasum"])
def test_fit_with_sync_batch_norm_or_adasum(what):
    cases.check_fit_with_sync_batch_norm_or_adasum(keras, SGD, what, "k3_xla_" + what)


def test_mixed_precision_overflow_in_local_layer_under_xla():
    # Two collectives in the step: the gradients' group and the finite check's Min.
    mixed.check_overflow_in_local_layer(keras, SGD, jit_compile=True)


def test_tape_in_jit_compiled_loop():
    cases.check_tape_in_jit_loop(keras, "k3_xla_tape")


def test_build_without_lowering_turns_xla_off_with_warning():
    cases.check_no_lowering_turns_xla_off(keras, SGD)


def test_build_without_lowering_raises_without_callbacks():
    cases.check_no_lowering_without_callbacks_raises(keras, SGD)


# Last: ranks outside the set build no models there, so Keras's layer-name
# counters, and with them the collectives' names in later graphs, would differ.
def test_fit_on_a_process_set_under_xla():
    keras_cases.check_fit_on_process_set(keras, SGD, jit_compile=True)
