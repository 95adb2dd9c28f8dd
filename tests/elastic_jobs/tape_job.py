"""An elastic tf.function tape loop for the launcher tests: linear regression
over tape_data's epochs, the data re-sharded by tf_ring.elastic.shard_dataset,
the weights and progress in a TensorFlowState committed every step. Prints
START/STEP lines like counter_job.py and, at the end, the weights (which must
equal tape_data.reference_weights() however the world changed).
COUNTER_KILL_RANK_AT / COUNTER_MARKER: kill_plan.py."""
import json
import os
import time

import tensorflow as tf

import tf_ring as hvd
import kill_plan
from tape_data import EPOCHS, G, LR, N, epoch_dataset
from tf_ring import elastic

hvd.init()
w = tf.Variable(tf.zeros([4, 1]))
state = elastic.TensorFlowState([w], epoch=0, processed=0, step=0)


# TAPE_KILL_INSIDE_STEP=1: a planned kill comes just before the step, not after it.
inside_step = os.environ.get("TAPE_KILL_INSIDE_STEP") == "1"


# TAPE_JIT=1 compiles the step with XLA: the gradients' allreduce is a custom call.
@tf.function(jit_compile=os.environ.get("TAPE_JIT") == "1")
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
    tape = hvd.DistributedGradientTape(tape)  # averages: every rank has G / size samples
    w.assign_sub(LR * tape.gradient(loss, [w])[0])
    return loss


@elastic.run
def train(state):
    print("START rank=%d size=%d step=%d pid=%d t=%.3f" % (hvd.rank(), hvd.size(), state.step,
                                                           os.getpid(), time.time()),
          flush=True)
    per_rank = G // hvd.size()
    while state.epoch < EPOCHS:
        data = elastic.shard_dataset(epoch_dataset(state.epoch), state.processed).batch(per_rank)
        for x, y in data:
            if inside_step:  # the others meet the loss inside their next step
                kill_plan.maybe_kill(state.step + 1, hvd.rank(), hvd.size())
            train_step(x, y)
            state.processed += elastic.samples_per_step(per_rank)
            state.step += 1
            print("STEP rank=%d size=%d step=%d t=%.3f" % (hvd.rank(), hvd.size(), state.step,
                                                           time.time()), flush=True)
            if not inside_step:  # the others meet the loss in their next commit
                kill_plan.maybe_kill(state.step, hvd.rank(), hvd.size())
            time.sleep(0.1)
            state.commit()
        assert state.processed == N, state.processed
        state.epoch, state.processed = state.epoch + 1, 0
        state.commit()


train(state)
print("END rank=%d size=%d step=%d w=%s" % (hvd.rank(), hvd.size(), state.step,
                                            json.dumps(w.numpy().ravel().tolist())), flush=True)
