"""Job for test_reliability: rank 1 dies in the middle of training, in the
way named by the first argument:
  kill   SIGKILL, as the OOM killer would (exit code 137)
  exit   sys.exit(3) between two collectives, with Python's exit handlers
  crash  abort() inside the process (SIGABRT, exit code 134), as a C++ crash would
With "xla" as the second argument each step is an XLA-compiled function, so
the survivors are blocked inside a compiled collective when rank 1 dies."""
import os
import signal
import sys
import time

import tensorflow as tf

import tf_ring as hvd

mode = sys.argv[1] if len(sys.argv) > 1 else "kill"
compiled = len(sys.argv) > 2 and sys.argv[2] == "xla"
hvd.init()
w = tf.Variable(tf.ones(1000))


def train_step():
    w.assign_sub(hvd.allreduce(w * 0.001, name="grad"))


if compiled:  # jit_compile=True fails outright, never falls back, if it cannot compile
    train_step = tf.function(train_step, jit_compile=True)

for step in range(100000):
    train_step()
    if step == 20 and hvd.rank() == 1:
        print("rank 1 dies at %.3f" % time.time(), flush=True)  # the test times the end from here
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif mode == "exit":
            sys.exit(3)
        elif mode == "crash":
            os.abort()
