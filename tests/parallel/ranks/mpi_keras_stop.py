"""Keras 3: a stop on one rank stops fit() on all (see keras_stop_cases.py)."""
import keras
import pytest

import keras_stop_cases as cases

SGD = keras.optimizers.SGD


@pytest.mark.parametrize("stopping_rank", [0, -1], ids=["first_rank", "last_rank"])
def test_stop_inside_an_epoch_on_one_rank_stops_every_rank(stopping_rank):
    cases.check_one_rank_stops_inside_an_epoch(keras, SGD, stopping_rank)


def test_stop_at_an_epoch_end_on_one_rank_stops_every_rank():
    cases.check_one_rank_stops_at_an_epoch_end(keras, SGD)


def test_stop_agreed_with_only_the_metric_callback():
    cases.check_stop_agreed_with_only_the_metric_callback(keras, SGD)


def test_slow_rank_is_not_stopped():
    cases.check_slow_ranks_are_not_stopped(keras, SGD)
