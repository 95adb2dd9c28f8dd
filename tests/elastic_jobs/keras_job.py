"""The tape job's linear regression trained with Keras 3 `model.fit`:
DistributedOptimizer(SGD), KerasState, CommitStateCallback every batch, one
fit() per epoch on the rest of that epoch's data (re-sharded by
tf_ring.elastic.shard_dataset for the world of the moment). Prints the same
START/STEP/END lines as tape_job.py; the END weights must equal
tape_data.reference_weights() however the world changed. Kills:
kill_plan.py."""
import json
import os
import time

import keras
import numpy as np

import kill_plan
import tf_ring.keras as hvd
from tape_data import EPOCHS, G, LR, N, epoch_dataset
from tf_ring import elastic

hvd.init()
model = keras.Sequential([keras.Input((4,)),
                          keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros")])
model.compile(hvd.DistributedOptimizer(keras.optimizers.SGD(LR)), loss="mse")
state = hvd.elastic.KerasState(model, epoch=0, batch=0, step=0)


class CountAndMaybeKill(keras.callbacks.Callback):
    """Counts finished batches into the state before CommitStateCallback
    commits them, and plays the kill plan."""

    def on_train_batch_end(self, batch, logs=None):
        state.batch += 1
        state.step += 1
        print("STEP rank=%d size=%d step=%d t=%.3f" % (hvd.rank(), hvd.size(), state.step,
                                                       time.time()), flush=True)
        kill_plan.maybe_kill(state.step, hvd.rank(), hvd.size())
        time.sleep(0.1)


callbacks = [CountAndMaybeKill(), hvd.elastic.CommitStateCallback(state, batches_per_commit=1)]


@hvd.elastic.run
def train(state):
    print("START rank=%d size=%d step=%d pid=%d t=%.3f" % (hvd.rank(), hvd.size(), state.step,
                                                           os.getpid(), time.time()), flush=True)
    per_rank = G // hvd.size()
    while state.epoch < EPOCHS:
        done = state.batch * G  # samples of this epoch already trained on
        data = elastic.shard_dataset(epoch_dataset(state.epoch), done).batch(per_rank)
        model.fit(data, epochs=1, steps_per_epoch=(N - done) // G, callbacks=callbacks, verbose=0)
        state.epoch, state.batch = state.epoch + 1, 0
        state.commit()


train(state)
weights = np.asarray(model.get_weights()[0]).ravel()
print("END rank=%d size=%d step=%d w=%s" % (hvd.rank(), hvd.size(), state.step,
                                            json.dumps(weights.tolist())), flush=True)
