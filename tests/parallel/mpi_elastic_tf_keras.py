"""tf_ring.keras.elastic with legacy tf_keras: the Keras checks of
mpi_elastic_state.py. TF_USE_LEGACY_KERAS must be set before tf_ring.keras
is imported (see mpi_tf_keras.py)."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

import elastic_keras_cases as cases  # noqa: E402
import tf_ring.keras as hvd  # noqa: E402


def test_tf_keras_is_the_active_keras():
    assert tf.keras.Model is tf_keras.Model
    assert issubclass(hvd.elastic.CommitStateCallback, tf_keras.callbacks.Callback)


def test_keras_state():
    cases.check_keras_state(tf_keras)


@pytest.mark.parametrize("failure,relative_epochs", [("lost_rank", True),
                                                     ("hosts_updated", False)])
def test_fit_resumes_where_the_commit_was(failure, relative_epochs):
    cases.check_fit_resumes(tf_keras, failure, relative_epochs)
