"""tf_ring.keras with legacy tf_keras (Keras 2): the same checks as mpi_keras.py.

TensorFlow picks tf_keras for tf.keras when TF_USE_LEGACY_KERAS=1 is set before
tf.keras is first touched; tf_ring itself never touches tf.keras, so setting it
here (before tf_ring.keras is imported) is early enough. The first test proves it.
"""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

import keras_cases as cases  # noqa: E402
import keras_sparse_cases as sparse_cases  # noqa: E402
import keras_partial_cases as partial_cases  # noqa: E402
import tf_ring.keras as hvd  # noqa: E402

SGD = tf_keras.optimizers.SGD
LEGACY_SGD = tf_keras.optimizers.legacy.SGD


def test_tf_keras_is_the_active_keras():
    assert tf.keras.Model is tf_keras.Model
    assert issubclass(hvd.callbacks.BroadcastGlobalVariablesCallback, tf_keras.callbacks.Callback)


@pytest.mark.parametrize("sgd", [SGD, LEGACY_SGD], ids=["optimizer", "legacy_optimizer"])
def test_fit_matches_single_process_on_global_batch(sgd):
    cases.check_matches_single_process(tf_keras, sgd)


def test_custom_training_loop_matches_single_process():
    cases.check_custom_training_loop(tf_keras, SGD)


@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_embedding_gradients(sparse_as_dense):
    cases.check_sparse_gradients(tf_keras, SGD, sparse_as_dense)


@pytest.mark.parametrize("mode", ["fit", "loop"])
@pytest.mark.parametrize("adam", [tf_keras.optimizers.Adam, tf_keras.optimizers.legacy.Adam],
                         ids=["optimizer", "legacy_optimizer"])
def test_sparse_adam_follows_plain_keras(adam, mode):
    # tf_keras's Adam sums repeated rows before its update: sparse and dense agree there.
    sparse_cases.check_sparse_adam_trajectory(tf_keras, lambda: adam(sparse_cases.LR), mode,
                                              dense_differs=False)


def test_sparse_adam_under_loss_scaling_follows_plain_keras():
    sparse_cases.check_sparse_adam_under_loss_scaling(
        tf_keras, lambda: tf_keras.optimizers.Adam(sparse_cases.LR))


def test_optimizer_keeps_class_and_config():
    cases.check_keeps_optimizer_class_and_config(tf_keras, SGD)


@pytest.mark.parametrize("sgd", [SGD, LEGACY_SGD], ids=["optimizer", "legacy_optimizer"])
@pytest.mark.parametrize("average_aggregated", [False, True])
def test_backward_passes_per_step(average_aggregated, sgd):
    cases.check_backward_passes(tf_keras, sgd, average_aggregated)


@pytest.mark.parametrize("suffix", [".keras", ".h5"])
def test_save_and_load_model(tmp_path, suffix):
    cases.check_save_and_load(tf_keras, SGD, tmp_path, suffix)


@pytest.mark.parametrize("optimizer", ["adam", "momentum", "legacy_adam"])
def test_broadcast_callback_equalizes_weights_and_optimizer_state(optimizer):
    # tf_keras optimizers create their slots at the first apply; the callback
    # broadcasts again after the first batch to cover them.
    make = {"adam": lambda: tf_keras.optimizers.Adam(0.01),
            "momentum": lambda: SGD(0.05, momentum=0.9),
            "legacy_adam": lambda: tf_keras.optimizers.legacy.Adam(0.01)}[optimizer]
    cases.check_broadcast_callback(tf_keras, make, False, "tfk_bcast_" + optimizer)


def test_metric_average_callback():
    cases.check_metric_average(tf_keras, SGD)


def test_learning_rate_schedule_callback():
    cases.check_schedule(tf_keras, LEGACY_SGD)


def test_momentum_correction_scales_velocity():
    cases.check_momentum_correction(tf_keras, SGD)


def test_legacy_momentum_correction_lasts_one_batch():
    cases.check_legacy_momentum_correction(tf_keras, LEGACY_SGD)


@pytest.mark.parametrize("sgd", [SGD, LEGACY_SGD], ids=["optimizer", "legacy_optimizer"])
def test_partial_distributed_optimizer_keeps_local_layer(sgd):
    partial_cases.check_partial_optimizer(tf_keras, sgd, scale_local_gradients=True)


def test_register_local_var_in_custom_step():
    partial_cases.check_register_local_var(tf_keras, SGD)


def test_horovod_optimizer_arguments():
    cases.check_horovod_optimizer_arguments(tf_keras, SGD)


@pytest.mark.parametrize("suffix", [".keras", ".h5"])
def test_best_model_checkpoint_saves_on_rank_0_only(tmp_path, suffix):
    cases.check_best_model_checkpoint(tf_keras, SGD, tmp_path, suffix)


def test_fit_on_a_process_set_matches_single_process():
    cases.check_fit_on_process_set(tf_keras, SGD)
