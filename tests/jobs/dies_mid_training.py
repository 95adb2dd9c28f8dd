"""Job for test_reliability: rank 1 dies in the middle of training, in the
way named by the first argument:
  kill   SIGKILL, as the OOM killer would (exit code 137)
  exit   sys.exit(3) between two collectives, with Python's exit handlers
  crash  abort() inside the process (SIGABRT, exit code 134), as a C++ crash would"""
import os
import signal
import sys
import time

import tensorflow as tf

import tf_ring as hvd

mode = sys.argv[1] if len(sys.argv) > 1 else "kill"
hvd.init()
w = tf.Variable(tf.ones(1000))
for step in range(100000):
    grad = hvd.allreduce(w * 0.001, name="grad")
    w.assign_sub(grad)
    if step == 20 and hvd.rank() == 1:
        print("rank 1 dies at %.3f" % time.time(), flush=True)  # the test times the end from here
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif mode == "exit":
            sys.exit(3)
        elif mode == "crash":
            os.abort()
