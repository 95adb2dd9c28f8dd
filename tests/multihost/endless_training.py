"""A training loop that runs until it is killed (at most 10 minutes): the
host-death tests kill one host's processes while every rank is inside it."""
import socket
import sys
import time

import numpy as np
import tensorflow as tf

import tf_ring

tf_ring.init()
rng = np.random.default_rng(tf_ring.rank())
w = tf.Variable(tf.zeros([64, 1]))
tf_ring.broadcast_variables([w], root_rank=0)
optimizer = tf.keras.optimizers.SGD(0.01)


@tf.function
def step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
    tape = tf_ring.DistributedGradientTape(tape)
    optimizer.apply_gradients(zip(tape.gradient(loss, [w]), [w]))
    return loss


deadline = time.time() + 600
for n in range(1000000):
    step(rng.normal(size=(32, 64)).astype(np.float32), rng.normal(size=(32, 1)).astype(np.float32))
    if n == 5:
        print("TRAINING rank %d on %s" % (tf_ring.rank(), socket.gethostname()), flush=True)
    if time.time() > deadline:
        sys.exit("endless_training: nobody killed me within 10 minutes")
