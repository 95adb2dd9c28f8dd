"""tf_keras: a stop on one rank stops fit() on all (see keras_stop_cases.py)."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import tf_keras  # noqa: E402

import keras_stop_cases as cases  # noqa: E402

SGD = tf_keras.optimizers.SGD


def test_stop_inside_an_epoch_on_one_rank_stops_every_rank():
    cases.check_one_rank_stops_inside_an_epoch(tf_keras, SGD, 0)


def test_stop_at_an_epoch_end_on_one_rank_stops_every_rank():
    cases.check_one_rank_stops_at_an_epoch_end(tf_keras, SGD)
