"""The in-process review cases (issue 40): functions traced before a shrink,
called after it, and a second rank lost while the survivors re-initialise.
The last rank SIGKILLs itself at step 4 (kill_plan.py); REVIEW_CASE picks
what each step checks against values worked out here from the world size:

- traced_size: a tf.function tape step (an embedding's IndexedSlices
  gradient averaged, a local source's gradient scaled by the size), the
  gradient of a Sum reducescatter and a Keras DistributedOptimizer step of
  a local variable (scale_local_gradients), all traced once before the loss.
- set_ids: sets [last rank], [all but the last] (Y) and, on 3 ranks, [0];
  the loss empties the first. A function traced on Y's members before the
  loss must still reduce over Y; the emptied set must fail naming it.
- second_loss: rank 1 (of the world) SIGKILLs itself when the survivors of
  the first loss start re-initialising, before its new engine starts or
  (REVIEW_SECOND_LOSS=after) after; the one rank left goes on.

Prints START, CHECK and END lines for tests/launcher/test_inprocess_review.py."""
import os
import time

import numpy as np
import tensorflow as tf

import kill_plan
import tf_ring as hvd
from tf_ring.runtime import basics
from tf_ring import elastic

CASE = os.environ["REVIEW_CASE"]
STEPS = 8

world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "0"))
sets = []
if CASE == "set_ids":
    sets = [hvd.ProcessSet([world - 1]), hvd.ProcessSet(list(range(world - 1)))]
    sets += [hvd.ProcessSet([0])] if world > 2 else []
hvd.init(process_sets=sets or None)
state = elastic.ObjectState(step=0, total=0)

if CASE == "second_loss":
    from mpi4py import MPI
    real_init = basics.init

    def init_losing_rank_1(*args, **kwargs):
        # The first loss's survivors start again; world rank 1 dies before
        # its engine starts, or (REVIEW_SECOND_LOSS=after) once it has.
        dies = MPI.COMM_WORLD.Get_rank() == 1 and elastic.reset_count() == 1
        if dies and os.environ.get("REVIEW_SECOND_LOSS") != "after":
            os.kill(os.getpid(), 9)
        result = real_init(*args, **kwargs)
        if dies:
            os.kill(os.getpid(), 9)
        return result

    basics.init = init_losing_rank_1

# traced_size: traced once below, before any loss.
emb = tf.Variable(tf.zeros([4, 1]))
weight = tf.Variable(float(hvd.rank() + 1))  # survivors keep their ranks: the lost one is last
local = tf.Variable(1.0)
blocks = tf.Variable(tf.ones([6, 1]))  # 6 rows divide over 3, 2 and 1 ranks


@tf.function
def tape_step():
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.gather(emb, [0])) * weight + local
    tape = hvd.DistributedGradientTape(tape)
    tape.register_local_source(local)
    sparse, local_grad = tape.gradient(loss, [emb, local])
    return tf.convert_to_tensor(sparse)[0, 0], local_grad


keras_local = None
if CASE == "traced_size":
    import keras
    import tf_ring.keras as hvd_keras
    keras_local = keras.Variable(0.0)
    keras_opt = hvd_keras.DistributedOptimizer(keras.optimizers.SGD(1.0))
    keras_opt.register_local_var(keras_local)
    keras_opt.build([keras_local])


@tf.function
def keras_local_step():
    """One SGD step (rate 1) from 0 with gradient 1: -1/size when the local
    gradient is divided by the size."""
    keras_local.assign(0.0)
    keras_opt.apply_gradients([(tf.constant(1.0), keras_local)])
    return keras_local.value


@tf.function
def reducescatter_grad():
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(hvd.reducescatter(blocks, op=hvd.Sum))
    return tape.gradient(loss, blocks)


def check_traced_size(size):
    sparse, local_grad = (float(t) for t in tape_step())
    grad = reducescatter_grad().numpy()
    keras_step = float(keras_local_step())
    # Independently: the mean of 1..size, 1/size, size everywhere, -1/size.
    ok = (np.isclose(sparse, (size + 1) / 2) and np.isclose(local_grad, 1.0 / size)
          and np.allclose(grad, size) and np.isclose(keras_step, -1.0 / size))
    return ok, "sparse=%g local=%g reducescatter_grad=%g keras_local_step=%g" % (
        sparse, local_grad, grad[0, 0], keras_step)


# set_ids: Y's function, traced by Y's members before any loss.
Y = sets[1] if sets else None
in_y = Y is not None and Y.included()
sum_over_y = tf.function(lambda: hvd.allreduce(tf.constant(1.0), op=hvd.Sum, process_set=Y,
                                               name="over.y"))


def check_set_ids(size):
    got = float(sum_over_y()) if in_y else len(Y.ranks)
    return got == len(Y.ranks), "sum over Y=%s: %g" % (Y.ranks, got)


def check(size):
    if CASE == "traced_size":
        return check_traced_size(size)
    if CASE == "set_ids":
        return check_set_ids(size)
    return True, ""


check(hvd.size())  # traces every function at the first size


@elastic.run
def train(state):
    print("START rank=%d size=%d step=%d pid=%d" % (hvd.rank(), hvd.size(), state.step,
                                                    os.getpid()), flush=True)
    while state.step < STEPS:
        ok, what = check(hvd.size())
        print("CHECK rank=%d size=%d step=%d ok=%s %s" % (hvd.rank(), hvd.size(), state.step,
                                                          ok, what), flush=True)
        state.total += int(hvd.allreduce(tf.constant(state.step), op=hvd.Sum,
                                         name="count").numpy()) // hvd.size()
        state.step += 1
        kill_plan.maybe_kill(state.step, hvd.rank(), hvd.size())
        time.sleep(0.1)
        state.commit()


train(state)
if CASE == "set_ids":
    try:
        hvd.allreduce(tf.constant(1.0), process_set=sets[0], name="emptied")
        print("EMPTIED rank=%d no error" % hvd.rank(), flush=True)
    except ValueError as e:
        print("EMPTIED rank=%d %s" % (hvd.rank(), e), flush=True)
print("END rank=%d size=%d step=%d total=%d pid=%d" % (hvd.rank(), hvd.size(), state.step,
                                                      state.total, os.getpid()), flush=True)
