"""tf.compat.v1 graph training in a MonitoredTrainingSession with
tf_ring.BroadcastGlobalVariablesHook and the v1 tf_ring.DistributedOptimizer.

Data: scikit-learn's bundled 8x8 digits (sklearn.datasets.load_digits), no
download. Works on TensorFlow 2.15 and 2.21.

    tfringrun -np 2 python keras_examples/monitored_session.py
"""
import argparse
import tempfile

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

import tf_ring as hvd


def build_graph(learning_rate, seed):
    images = tf.compat.v1.placeholder(tf.float32, [None, 64])
    labels = tf.compat.v1.placeholder(tf.int64, [None])
    init = tf.compat.v1.glorot_uniform_initializer(seed=seed)  # differs per rank on purpose
    w1 = tf.compat.v1.get_variable("w1", [64, 64], initializer=init)
    b1 = tf.compat.v1.get_variable("b1", [64], initializer=tf.compat.v1.zeros_initializer())
    w2 = tf.compat.v1.get_variable("w2", [64, 10], initializer=init)
    b2 = tf.compat.v1.get_variable("b2", [10], initializer=tf.compat.v1.zeros_initializer())
    logits = tf.matmul(tf.nn.relu(tf.matmul(images, w1) + b1), w2) + b2
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                         logits=logits))
    optimizer = hvd.DistributedOptimizer(
        tf.compat.v1.train.MomentumOptimizer(learning_rate * hvd.size(), momentum=0.9))
    train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_or_create_global_step())
    return images, labels, loss, train_op, [w1, b1, w2, b2]


class FinalWeights(tf.compat.v1.train.SessionRunHook):
    """Reads the weights after the last step."""

    def __init__(self, variables):
        self.variables, self.values = variables, None

    def end(self, session):
        self.values = session.run(self.variables)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    args = parser.parse_args()

    hvd.init()
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    x_train, y_train = x[:1500][hvd.rank()::hvd.size()], y[:1500][hvd.rank()::hvd.size()]
    x_test, y_test = x[1500:], y[1500:]
    rng = np.random.default_rng(hvd.rank())

    with tf.Graph().as_default():
        images, labels, loss, train_op, variables = build_graph(0.02, seed=hvd.rank())
        final = FinalWeights(variables)
        hooks = [hvd.BroadcastGlobalVariablesHook(0),
                 tf.compat.v1.train.StopAtStepHook(last_step=args.steps), final]
        # Only rank 0 writes checkpoints, so ranks never fight over files.
        checkpoint_dir = tempfile.mkdtemp(prefix="tf_ring_mts_") if hvd.rank() == 0 else None
        with tf.compat.v1.train.MonitoredTrainingSession(checkpoint_dir=checkpoint_dir,
                                                         hooks=hooks) as session:
            step = 0
            while not session.should_stop():
                batch = rng.integers(0, len(x_train), args.batch_size)
                _, loss_value = session.run([train_op, loss],
                                            feed_dict={images: x_train[batch], labels: y_train[batch]})
                step += 1
                if hvd.rank() == 0 and step % 100 == 0:
                    print("step %d: loss %.4f" % (step, loss_value), flush=True)

        weights = final.values

    w1, b1, w2, b2 = weights
    logits = np.maximum(x_test @ w1 + b1, 0) @ w2 + b2
    test_accuracy = np.mean(np.argmax(logits, axis=1) == y_test)

    same = all(all(np.array_equal(a, b) for a, b in zip(weights, other))
               for other in hvd.allgather_object(weights))
    if hvd.rank() == 0:
        print("test accuracy %.3f; weights identical on all %d ranks: %s"
              % (test_accuracy, hvd.size(), same), flush=True)
    if not same:
        raise SystemExit("ranks ended with different weights")


if __name__ == "__main__":
    main()
