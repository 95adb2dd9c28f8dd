"""Job for test_reliability: rank 1 is killed (SIGKILL) in the middle of training."""
import os
import signal

import tensorflow as tf

import tf_ring as hvd

hvd.init()
w = tf.Variable(tf.ones(1000))
for step in range(100000):
    grad = hvd.allreduce(w * 0.001, name="grad")
    w.assign_sub(grad)
    if step == 20 and hvd.rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
