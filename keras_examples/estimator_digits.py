"""tf.estimator training with tf_ring (TensorFlow 2.15 and older only).

tf.estimator was removed in TensorFlow 2.16; on newer versions this script
exits with a message saying so. Data: scikit-learn's bundled 8x8 digits
(sklearn.datasets.load_digits), no download.

    tfringrun -np 2 python keras_examples/estimator_digits.py
"""
import argparse
import sys
import tempfile

import numpy as np
import tensorflow as tf

if not hasattr(tf, "estimator"):
    sys.exit("estimator_digits.py needs tf.estimator, which TensorFlow %s no longer has "
             "(it was removed in 2.16). Run it with tensorflow-cpu==2.15.1, or see "
             "keras_examples/monitored_session.py for v1 graph training on this version."
             % tf.__version__)

from sklearn.datasets import load_digits  # noqa: E402

import tf_ring as hvd  # noqa: E402


def model_fn(features, labels, mode, params):
    hidden = tf.compat.v1.layers.dense(features["x"], 64, activation=tf.nn.relu, name="hidden")
    logits = tf.compat.v1.layers.dense(hidden, 10, name="logits")
    predictions = tf.argmax(logits, axis=1)
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.EstimatorSpec(mode, predictions={"class": predictions})
    loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels, logits)
    if mode == tf.estimator.ModeKeys.EVAL:
        accuracy = tf.compat.v1.metrics.accuracy(labels, predictions)
        return tf.estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops={"accuracy": accuracy})
    # Gradients are averaged over ranks; the learning rate grows with them.
    optimizer = hvd.DistributedOptimizer(
        tf.compat.v1.train.MomentumOptimizer(params["lr"] * hvd.size(), momentum=0.9))
    train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    args = parser.parse_args()

    hvd.init()
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int32)
    x_train, y_train = x[:1500][hvd.rank()::hvd.size()], y[:1500][hvd.rank()::hvd.size()]
    x_test, y_test = x[1500:], y[1500:]

    def train_input():
        data = tf.data.Dataset.from_tensor_slices(({"x": x_train}, y_train))
        return data.shuffle(len(x_train), seed=hvd.rank()).repeat().batch(args.batch_size)

    def test_input():
        return tf.data.Dataset.from_tensor_slices(({"x": x_test}, y_test)).batch(256)

    # Every rank needs its own model_dir: checkpoints must not collide.
    model_dir = tempfile.mkdtemp(prefix="tf_ring_estimator_rank%d_" % hvd.rank())
    config = tf.estimator.RunConfig(tf_random_seed=hvd.rank())  # ranks start apart on purpose
    estimator = tf.estimator.Estimator(model_fn, model_dir=model_dir, config=config,
                                       params={"lr": 0.02})
    estimator.train(train_input, steps=args.steps, hooks=[hvd.BroadcastGlobalVariablesHook(0)])
    accuracy = estimator.evaluate(test_input)["accuracy"]

    names = ["hidden/kernel", "hidden/bias", "logits/kernel", "logits/bias"]
    weights = [estimator.get_variable_value(n) for n in names]
    same = all(all(np.array_equal(a, b) for a, b in zip(weights, other))
               for other in hvd.allgather_object(weights))
    if hvd.rank() == 0:
        print("test accuracy %.3f; weights identical on all %d ranks: %s"
              % (accuracy, hvd.size(), same), flush=True)
    if not same:
        raise SystemExit("ranks ended with different weights")


if __name__ == "__main__":
    main()
