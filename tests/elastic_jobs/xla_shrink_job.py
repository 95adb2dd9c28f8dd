"""A compiled (jit_compile=True) collective across an in-process shrink: the
last rank SIGKILLs itself at step 3 (kill_plan.py). XLA_SHRINK_OP picks the
collective: allgather (default), alltoall or reducescatter. After the reset,
the function compiled for the old size, called with the input it was
compiled for, must fail with a clear error, not hang or return a wrong
shape; a function traced again (in a reset callback) works on the ranks
left. Prints STALE and END lines for the test to check."""
import os
import time

import numpy as np
import tensorflow as tf

import kill_plan
import tf_ring as hvd
from tf_ring import elastic

OP = os.environ.get("XLA_SHRINK_OP", "allgather")

hvd.init()
state = elastic.ObjectState(step=0)


def make_input(size):
    """This rank's input for a world of `size` ranks."""
    if OP == "allgather":
        return tf.fill([1, 2], float(hvd.rank()))
    if OP == "alltoall":  # row j goes to rank j
        return tf.fill([size, 2], float(hvd.rank()))
    return tf.ones([size, 2]) * float(hvd.rank() + 1)  # reducescatter: one row per rank


def check(out, size):
    """Independently worked out: what each op must return on `size` ranks."""
    if OP in ("allgather", "alltoall"):  # row i came from rank i
        assert out.shape == (size, 2) and out[:, 0].tolist() == list(range(size)), out
    else:
        np.testing.assert_array_equal(out, np.full((1, 2), size * (size + 1) / 2))


def make_collective():
    ops = {"allgather": lambda t: hvd.allgather(t, name="xla.shrink"),
           "alltoall": lambda t: hvd.alltoall(t, name="xla.shrink"),
           "reducescatter": lambda t: hvd.reducescatter(t, op=hvd.Sum, name="xla.shrink")}
    return tf.function(ops[OP], jit_compile=True)


collective = make_collective()
compiled_before, size_before = collective, hvd.size()  # called once after the shrink


def on_reset():
    global collective
    collective = make_collective()  # retrace and recompile for the new size


state.register_reset_callbacks([on_reset])


@elastic.run
def train(state):
    while state.step < 6:
        check(collective(make_input(hvd.size())).numpy(), hvd.size())
        state.step += 1
        kill_plan.maybe_kill(state.step, hvd.rank(), hvd.size())
        time.sleep(0.1)
        state.commit()


train(state)
try:
    compiled_before(make_input(size_before)).numpy()
    print("STALE rank=%d no error" % hvd.rank(), flush=True)
except tf.errors.OpError as e:
    print("STALE rank=%d %s: %s" % (hvd.rank(), type(e).__name__, e.message.splitlines()[0]),
          flush=True)
print("END rank=%d size=%d step=%d pid=%d" % (hvd.rank(), hvd.size(), state.step, os.getpid()),
      flush=True)
