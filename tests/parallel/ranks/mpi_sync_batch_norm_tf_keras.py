"""SyncBatchNormalization with legacy tf_keras (see mpi_tf_keras.py for how
tf_keras becomes the active Keras) against one process on the whole batch."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import pytest  # noqa: E402
import tf_keras  # noqa: E402

import sync_bn_cases as cases  # noqa: E402
import tf_ring.keras as hvd  # noqa: E402


def test_is_a_tf_keras_batch_normalization():
    assert isinstance(hvd.SyncBatchNormalization(), tf_keras.layers.BatchNormalization)
    assert hvd.SyncBatchNormalization().fused is False
    with pytest.raises(ValueError, match="fused"):
        hvd.SyncBatchNormalization(fused=True)


@pytest.mark.parametrize("in_function", [False, True], ids=["eager", "tf_function"])
def test_training_statistics_cover_every_rank_uneven_batches(in_function):
    cases.check_training_statistics(tf_keras, in_function)


def test_fit_matches_single_process():
    cases.check_fit_matches_single_process(tf_keras)
