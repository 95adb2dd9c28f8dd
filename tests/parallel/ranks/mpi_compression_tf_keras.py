"""Compression.powersgd with tf_ring.keras on legacy tf_keras (Keras 2): the
checks of mpi_compression.py that depend on the Keras flavour, with
tf_keras's optimizers and its legacy ones. TF_USE_LEGACY_KERAS must be set
before tf_ring.keras is imported (see mpi_tf_keras.py)."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

import compression_cases as cases  # noqa: E402

OPTIMIZERS = {"optimizer": tf_keras.optimizers.Adam,
              "legacy_optimizer": tf_keras.optimizers.legacy.Adam}


def test_tf_keras_is_the_active_keras():
    assert tf.keras.Model is tf_keras.Model


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_fit_on_digits_matches_uncompressed_accuracy(kind):
    cases.check_digits_accuracy(tf_keras, lambda: OPTIMIZERS[kind](0.005), "psgd_tfk_" + kind)


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_checkpoint_and_elastic_state(kind, tmp_path):
    sgd = {"optimizer": tf_keras.optimizers.SGD, "legacy_optimizer": tf_keras.optimizers.legacy.SGD}
    cases.check_checkpoint_and_elastic_state(tf_keras, lambda: sgd[kind](0.1), tmp_path,
                                             "psgd_tfk_state_" + kind)
