"""tf_keras under mixed_float16: the same checks as mpi_keras_mixed_precision.py,
with tf_keras's loss-scale optimizers for its current and legacy optimizers."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
# A rank that skipped an allreduce its peers wait in must fail the job, not hang it.
os.environ.setdefault("TF_RING_STALL_CHECK_TIME_SECONDS", "5")
os.environ.setdefault("TF_RING_STALL_SHUTDOWN_TIME_SECONDS", "20")

import pytest  # noqa: E402
import tf_keras  # noqa: E402

import keras_mixed_precision_cases as cases  # noqa: E402
import tf_ring.keras as hvd  # noqa: E402

SGD = tf_keras.optimizers.SGD
LEGACY_SGD = tf_keras.optimizers.legacy.SGD
LR = cases.LR


@pytest.mark.parametrize("sgd", [SGD, LEGACY_SGD], ids=["optimizer", "legacy_optimizer"])
def test_overflow_on_one_rank_skips_the_step_everywhere(sgd):
    # The loss-scale optimizer reaches ours through aggregate_gradients
    # (optimizer) or _aggregate_gradients (legacy_optimizer).
    cases.check_overflow_on_one_rank(tf_keras, lambda: hvd.DistributedOptimizer(sgd(LR)))


def test_ours_around_a_loss_scale_optimizer():
    cases.check_overflow_on_one_rank(tf_keras, lambda: hvd.DistributedOptimizer(
        tf_keras.mixed_precision.LossScaleOptimizer(SGD(LR))))


def test_overflow_with_backward_passes_per_step():
    # Legacy: its loss-scale optimizer's tf.cond also needs our step to return an op.
    cases.check_overflow_on_one_rank(
        tf_keras, lambda: hvd.DistributedOptimizer(LEGACY_SGD(LR), backward_passes_per_step=2),
        passes=2)


def test_overflow_in_a_local_layer():
    cases.check_overflow_in_local_layer(tf_keras, SGD)
