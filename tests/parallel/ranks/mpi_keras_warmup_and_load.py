"""Keras 3: LearningRateWarmupCallback's schedule and load_model's settings
(see keras_warmup_and_load_cases.py)."""
import os

# A reduction over the wrong ranks must fail the job, not hang it.
os.environ.setdefault("TF_RING_STALL_CHECK_TIME_SECONDS", "5")
os.environ.setdefault("TF_RING_STALL_SHUTDOWN_TIME_SECONDS", "20")

import keras  # noqa: E402

import keras_warmup_and_load_cases as cases  # noqa: E402

SGD = keras.optimizers.SGD


def test_learning_rate_warmup_follows_horovods_formula():
    cases.check_warmup(keras, SGD)


def test_load_model_keeps_sum_partial_process_set_settings(tmp_path):
    cases.check_load_model_sum_partial_on_a_process_set(keras, SGD, tmp_path, ".keras")


def test_load_model_keeps_predivide_and_compression(tmp_path):
    cases.check_load_model_average_with_predivide(keras, SGD, tmp_path, ".keras")
