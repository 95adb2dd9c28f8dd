"""tf_ring.keras with Keras 3: DistributedOptimizer, callbacks, save/load (XLA: mpi_keras_xla.py).

Every check compares against a single-process reference computed on each rank
(see keras_cases.py).
"""
import keras
import pytest

import keras_cases as cases
import keras_sparse_cases as sparse_cases
import keras_partial_cases as partial_cases

SGD = keras.optimizers.SGD


@pytest.mark.parametrize("compile_kwargs", [{}, {"run_eagerly": True}, {"steps_per_execution": 3}],
                         ids=["graph", "eager", "steps_per_execution"])
def test_fit_matches_single_process_on_global_batch(compile_kwargs):
    cases.check_matches_single_process(keras, SGD, **compile_kwargs)


def test_custom_training_loop_matches_single_process():
    cases.check_custom_training_loop(keras, SGD)


@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_embedding_gradients(sparse_as_dense):
    cases.check_sparse_gradients(keras, SGD, sparse_as_dense)


@pytest.mark.parametrize("mode", ["fit", "loop"])
def test_sparse_adam_follows_plain_keras(mode):
    sparse_cases.check_sparse_adam_trajectory(keras, lambda: keras.optimizers.Adam(sparse_cases.LR),
                                              mode, dense_differs=True)


def test_sparse_adam_under_loss_scaling_follows_plain_keras():
    sparse_cases.check_sparse_adam_under_loss_scaling(
        keras, lambda: keras.optimizers.Adam(sparse_cases.LR))


def test_compression_object_is_used():
    cases.check_compression(keras, SGD)


def test_optimizer_keeps_class_and_config():
    cases.check_keeps_optimizer_class_and_config(keras, SGD)


@pytest.mark.parametrize("average_aggregated", [False, True])
def test_backward_passes_per_step(average_aggregated):
    cases.check_backward_passes(keras, SGD, average_aggregated)


def test_save_and_load_model(tmp_path):
    cases.check_save_and_load(keras, SGD, tmp_path, ".keras")


@pytest.mark.parametrize("prebuild", [False, True], ids=["lazy_state", "built_state"])
@pytest.mark.parametrize("optimizer", ["adam", "momentum"])
def test_broadcast_callback_equalizes_weights_and_optimizer_state(optimizer, prebuild):
    make = {"adam": lambda: keras.optimizers.Adam(0.01),
            "momentum": lambda: SGD(0.05, momentum=0.9)}[optimizer]
    cases.check_broadcast_callback(keras, make, prebuild, "bcast_%s_%s" % (optimizer, prebuild))


def test_metric_average_callback():
    cases.check_metric_average(keras, SGD)


def test_learning_rate_schedule_callback():
    cases.check_schedule(keras, SGD)


def test_momentum_correction_scales_velocity():
    cases.check_momentum_correction(keras, SGD)


@pytest.mark.parametrize("scale_local_gradients", [True, False])
def test_partial_distributed_optimizer_keeps_local_layer(scale_local_gradients):
    partial_cases.check_partial_optimizer(keras, SGD, scale_local_gradients)


def test_register_local_var_in_custom_step():
    partial_cases.check_register_local_var(keras, SGD)


def test_horovod_optimizer_arguments():
    cases.check_horovod_optimizer_arguments(keras, SGD)


def test_best_model_checkpoint_saves_on_rank_0_only(tmp_path):
    cases.check_best_model_checkpoint(keras, SGD, tmp_path, ".keras")


def test_horovod_keras_names_are_exported():
    import tensorflow as tf

    import tf_ring
    import tf_ring.keras as tfk
    assert tfk.reducescatter is tf_ring.reducescatter
    assert tfk.broadcast_global_variables is tf_ring.broadcast_global_variables
    with pytest.raises(RuntimeError, match="graph mode"):
        tfk.broadcast_global_variables(0)
    rows = tfk.reducescatter(tf.ones((2 * tfk.size(), 1)) * (tfk.rank() + 1), op=tfk.Sum)
    expected = sum(r + 1 for r in range(tfk.size()))
    assert rows.numpy().tolist() == [[expected], [expected]]


def test_fit_on_a_process_set_matches_single_process():
    cases.check_fit_on_process_set(keras, SGD)
