"""tf_ring.keras.elastic with legacy tf_keras: the Keras checks of
mpi_elastic_state.py. TF_USE_LEGACY_KERAS must be set before tf_ring.keras
is imported (see mpi_tf_keras.py)."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np  # noqa: E402
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


def test_keras_state_in_v1_graph():
    """tf_keras without eager execution: values go through Keras's session,
    and the optimizer's variables that Keras has not initialized yet are."""
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        tf.compat.v1.keras.backend.set_session(session)
        model = cases.make_model(tf_keras, 1.0 + hvd.rank())
        optimizer = tf_keras.optimizers.Adam(0.1)
        state = hvd.elastic.KerasState(model, optimizer, epoch=10 + hvd.rank())
        state.sync()
        for weight in model.get_weights():
            np.testing.assert_array_equal(weight, np.ones_like(weight))
        assert state.epoch == 10
        model.set_weights([np.full((2, 2), 7.0, np.float32), np.full(2, 7.0, np.float32)])
        state.epoch = 11
        state.commit()
        model.set_weights([np.zeros((2, 2), np.float32), np.zeros(2, np.float32)])
        state.epoch = 12
        state.restore()
        for weight in model.get_weights():
            np.testing.assert_array_equal(weight, np.full_like(weight, 7.0))
        assert state.epoch == 11
