"""Compiled (jit_compile=True) collectives across an in-process shrink: the
last rank SIGKILLs itself at step 3 (kill_plan.py). Each step runs an
allgather, an alltoall and a reducescatter (XLA_SHRINK_OPS, comma-separated,
picks fewer), each compiled on its own. After the reset, each function
compiled for the old size, called with the input it was compiled for, must
fail with a clear error naming its tensor, not hang or return a wrong
shape; the functions traced again (in a reset callback) work on the ranks
left. One job for all three: each op's failure is its own, so they share
the job's start-up and its recovery. Prints STALE and END lines for the
test to check."""
import os
import time

import numpy as np
import tensorflow as tf

import kill_plan
import tf_ring as hvd
from tf_ring import elastic

OPS = os.environ.get("XLA_SHRINK_OPS", "allgather,alltoall,reducescatter").split(",")

hvd.init()
state = elastic.ObjectState(step=0)


def make_input(op, size):
    """This rank's input to `op` for a world of `size` ranks."""
    if op == "allgather":
        return tf.fill([1, 2], float(hvd.rank()))
    if op == "alltoall":  # row j goes to rank j
        return tf.fill([size, 2], float(hvd.rank()))
    return tf.ones([size, 2]) * float(hvd.rank() + 1)  # reducescatter: one row per rank


def check(op, out, size):
    """Independently worked out: what each op must return on `size` ranks."""
    if op in ("allgather", "alltoall"):  # row i came from rank i
        assert out.shape == (size, 2) and out[:, 0].tolist() == list(range(size)), (op, out)
    else:
        np.testing.assert_array_equal(out, np.full((1, 2), size * (size + 1) / 2))


def make_collective(op):
    name = "xla.shrink.%s" % op
    ops = {"allgather": lambda t: hvd.allgather(t, name=name),
           "alltoall": lambda t: hvd.alltoall(t, name=name),
           "reducescatter": lambda t: hvd.reducescatter(t, op=hvd.Sum, name=name)}
    return tf.function(ops[op], jit_compile=True)


collectives = {op: make_collective(op) for op in OPS}
compiled_before, size_before = dict(collectives), hvd.size()  # each called once after the shrink


def on_reset():
    for op in OPS:
        collectives[op] = make_collective(op)  # retrace and recompile for the new size


state.register_reset_callbacks([on_reset])


@elastic.run
def train(state):
    while state.step < 6:
        for op in OPS:
            check(op, collectives[op](make_input(op, hvd.size())).numpy(), hvd.size())
        state.step += 1
        kill_plan.maybe_kill(state.step, hvd.rank(), hvd.size())
        time.sleep(0.1)
        state.commit()


train(state)
for op in OPS:
    try:
        compiled_before[op](make_input(op, size_before)).numpy()
        print("STALE op=%s rank=%d no error" % (op, hvd.rank()), flush=True)
    except tf.errors.OpError as e:
        print("STALE op=%s rank=%d %s: %s" % (op, hvd.rank(), type(e).__name__,
                                               e.message.splitlines()[0]), flush=True)
print("END rank=%d size=%d step=%d pid=%d" % (hvd.rank(), hvd.size(), state.step, os.getpid()),
      flush=True)
