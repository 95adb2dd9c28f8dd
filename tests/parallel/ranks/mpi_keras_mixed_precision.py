"""Keras 3 under mixed_float16: an overflow on one rank only
(see keras_mixed_precision_cases.py)."""
import os

# A rank that skipped an allreduce its peers wait in must fail the job, not hang it.
os.environ.setdefault("TF_RING_STALL_CHECK_TIME_SECONDS", "5")
os.environ.setdefault("TF_RING_STALL_SHUTDOWN_TIME_SECONDS", "20")

import keras  # noqa: E402

import keras_mixed_precision_cases as cases  # noqa: E402
import tf_ring.keras as hvd  # noqa: E402

SGD = keras.optimizers.SGD
LR = cases.LR


def test_overflow_on_one_rank_skips_the_step_everywhere():
    # model.compile wraps ours in Keras's LossScaleOptimizer.
    cases.check_overflow_on_one_rank(keras, lambda: hvd.DistributedOptimizer(SGD(LR)))


def test_ours_around_a_loss_scale_optimizer():
    cases.check_overflow_on_one_rank(keras, lambda: hvd.DistributedOptimizer(
        keras.optimizers.LossScaleOptimizer(SGD(LR))))


def test_overflow_with_backward_passes_per_step():
    cases.check_overflow_on_one_rank(
        keras, lambda: hvd.DistributedOptimizer(SGD(LR), backward_passes_per_step=2), passes=2)


def test_overflow_in_a_local_layer():
    cases.check_overflow_in_local_layer(keras, SGD)
