"""A compiled (jit_compile=True) allgather across an in-process shrink: the
last rank SIGKILLs itself at step 3 (kill_plan.py). After the reset, the
function compiled for the old size must fail with a clear error, not hang or
return the wrong shape; a function traced again (in a reset callback) gathers
from the ranks left. Prints STALE and END lines for the test to check."""
import os
import time

import tensorflow as tf

import kill_plan
import tf_ring as hvd
from tf_ring import elastic

hvd.init()
state = elastic.ObjectState(step=0)


def make_gather():
    return tf.function(lambda t: hvd.allgather(t, name="xla.rows"), jit_compile=True)


gather = make_gather()
compiled_before = gather  # kept to call once after the shrink


def on_reset():
    global gather
    gather = make_gather()  # retrace and recompile for the new size


state.register_reset_callbacks([on_reset])


@elastic.run
def train(state):
    while state.step < 6:
        rows = gather(tf.fill([1, 2], float(hvd.rank()))).numpy()
        assert rows.shape == (hvd.size(), 2) and rows[:, 0].tolist() == list(range(hvd.size())), rows
        state.step += 1
        kill_plan.maybe_kill(state.step, hvd.rank(), hvd.size())
        time.sleep(0.1)
        state.commit()


train(state)
try:
    compiled_before(tf.fill([1, 2], float(hvd.rank())))
    print("STALE rank=%d no error" % hvd.rank(), flush=True)
except tf.errors.OpError as e:
    print("STALE rank=%d %s: %s" % (hvd.rank(), type(e).__name__, e.message.splitlines()[0]),
          flush=True)
print("END rank=%d size=%d step=%d pid=%d" % (hvd.rank(), hvd.size(), state.step, os.getpid()),
      flush=True)
