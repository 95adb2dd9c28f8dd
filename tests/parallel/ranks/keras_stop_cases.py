"""Checks shared by mpi_keras_stop.py (Keras 3) and mpi_tf_keras_stop.py
(tf_keras): a callback that stops fit() on one rank only stops it on every
rank at the same batch, and ranks that are only slow are not stopped.

Each check trains the same small model on every rank's shard and then
compares, over all ranks, the epochs and batches each trained and the
weights each ended with (identical, since they stepped together)."""
import time

import numpy as np

import tf_ring.keras as hvd
from keras_cases import FEATURES, PER_RANK_BATCH, assert_same_on_all_ranks, global_data, make_model
from keras_cases import shard

STEPS = 5  # batches per epoch
EPOCHS = 3


def counting_callback(k):
    class CountBatches(k.callbacks.Callback):
        """On every rank: the batches each epoch trained."""

        def __init__(self):
            super().__init__()
            self.batches = []

        def on_epoch_begin(self, epoch, logs=None):
            self.batches.append(0)

        def on_train_batch_end(self, batch, logs=None):
            self.batches[-1] += 1
    return CountBatches()


def stop_callback(k, epoch, batch=None, seconds=0.0):
    """Sets stop_training after `batch` of `epoch` (at the epoch's end when
    batch is None), after sleeping `seconds` there when given."""
    class StopHere(k.callbacks.Callback):
        def on_epoch_begin(self, e, logs=None):
            self.epoch = e

        def on_train_batch_end(self, b, logs=None):
            if batch is not None and self.epoch == epoch and b == batch:
                time.sleep(seconds)
                self.model.stop_training = True

        def on_epoch_end(self, e, logs=None):
            if batch is None and e == epoch:
                time.sleep(seconds)
                self.model.stop_training = True
    return StopHere()


def sleep_callback(k, batch, seconds):
    class Slow(k.callbacks.Callback):
        def on_train_batch_end(self, b, logs=None):
            if b == batch:
                time.sleep(seconds)
    return Slow()


def train(k, sgd, extra_callbacks, tf_ring_callbacks=None):
    x, y = global_data(STEPS)
    model = make_model(k)
    model.compile(optimizer=hvd.DistributedOptimizer(sgd(0.05)), loss="mse")
    counter = counting_callback(k)
    if tf_ring_callbacks is None:
        tf_ring_callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                             hvd.callbacks.MetricAverageCallback()]
    # The usual order: tf_ring's callbacks first, a rank's own ones after.
    model.fit(shard(x), shard(y), batch_size=PER_RANK_BATCH, epochs=EPOCHS, shuffle=False,
              verbose=0, callbacks=tf_ring_callbacks + [counter] + extra_callbacks)
    return model, counter.batches


def check_same_everywhere(model, batches, expected_batches, name):
    assert batches == expected_batches, batches
    assert_same_on_all_ranks([np.asarray(batches, np.float64)], name + ".batches")
    assert_same_on_all_ranks(model.get_weights(), name + ".weights")


def check_one_rank_stops_inside_an_epoch(k, sgd, stopping_rank):
    stopping_rank = stopping_rank % hvd.size()
    extra = [stop_callback(k, epoch=1, batch=2)] if hvd.rank() == stopping_rank else []
    model, batches = train(k, sgd, extra)
    check_same_everywhere(model, batches, [STEPS, 3], "stop_inside_epoch")


def check_one_rank_stops_at_an_epoch_end(k, sgd):
    extra = [stop_callback(k, epoch=0)] if hvd.rank() == 0 else []
    model, batches = train(k, sgd, extra)
    check_same_everywhere(model, batches, [STEPS], "stop_at_epoch_end")


def check_stop_agreed_with_only_the_metric_callback(k, sgd):
    """Any one tf_ring callback in the list makes the ranks agree."""
    extra = [stop_callback(k, epoch=0, batch=1)] if hvd.rank() == hvd.size() - 1 else []
    model, batches = train(k, sgd, extra, [hvd.callbacks.MetricAverageCallback()])
    assert batches == [2], batches
    assert_same_on_all_ranks([np.asarray(batches, np.float64)], "stop_metric_only.batches")


def check_slow_ranks_are_not_stopped(k, sgd):
    """A rank that sleeps longer than the stall check (5 s in the Keras
    groups) at a batch end (a checkpoint write on rank 0) trains on."""
    extra = [sleep_callback(k, batch=1, seconds=6.0)] if hvd.rank() == 0 else []
    model, batches = train(k, sgd, extra)
    check_same_everywhere(model, batches, [STEPS] * EPOCHS, "slow_rank")
