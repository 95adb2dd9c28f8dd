"""SyncBatchNormalization with Keras 3 against one process on the whole batch
(see sync_bn_cases.py)."""
import keras
import pytest

import sync_bn_cases as cases
import tf_ring.keras as hvd


def test_is_a_keras3_batch_normalization():
    assert isinstance(hvd.SyncBatchNormalization(), keras.layers.BatchNormalization)
    with pytest.raises(ValueError, match="fused"):
        hvd.SyncBatchNormalization(fused=True)


@pytest.mark.parametrize("in_function", [False, True], ids=["eager", "tf_function"])
def test_training_statistics_cover_every_rank_uneven_batches(in_function):
    cases.check_training_statistics(keras, in_function)


def test_fit_matches_single_process():
    cases.check_fit_matches_single_process(keras)
