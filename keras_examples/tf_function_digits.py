"""Custom tf.function training loop with tf_ring.DistributedGradientTape.

Data: scikit-learn's bundled 8x8 digits (sklearn.datasets.load_digits), which
ships inside the scikit-learn package, so nothing is downloaded. Each rank
trains on its own share of every batch; the tape averages the gradients.

    tfringrun -np 2 python keras_examples/tf_function_digits.py
"""
import argparse

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

import tf_ring as hvd


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    args = parser.parse_args()

    hvd.init()
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    x_train, y_train, x_test, y_test = x[:1500], y[:1500], x[1500:], y[1500:]
    # Each rank reads a disjoint share of the training set.
    x_train, y_train = x_train[hvd.rank()::hvd.size()], y_train[hvd.rank()::hvd.size()]

    tf.keras.utils.set_random_seed(hvd.rank())  # ranks start apart; broadcast fixes that
    model = tf.keras.Sequential([tf.keras.Input((64,)),
                                 tf.keras.layers.Dense(64, activation="relu"),
                                 tf.keras.layers.Dense(10)])
    # Scale the learning rate with the number of ranks (the global batch grows).
    optimizer = tf.keras.optimizers.SGD(0.05 * hvd.size(), momentum=0.9)
    optimizer.build(model.trainable_variables)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    optimizer_vars = optimizer.variables() if callable(optimizer.variables) else optimizer.variables
    hvd.broadcast_variables(model.variables + list(optimizer_vars), root_rank=0)

    @tf.function
    def train_step(images, labels):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(images, training=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return hvd.allreduce(loss)

    dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train))
    for epoch in range(args.epochs):
        for images, labels in dataset.shuffle(len(x_train), seed=epoch).batch(args.batch_size,
                                                                              drop_remainder=True):
            loss = train_step(images, labels)
        if hvd.rank() == 0:
            print("epoch %d: loss %.4f" % (epoch + 1, float(loss)), flush=True)

    weights = [w.numpy() for w in model.trainable_variables]
    same = all(all(np.array_equal(a, b) for a, b in zip(weights, other))
               for other in hvd.allgather_object(weights))
    accuracy = float(np.mean(np.argmax(model(x_test).numpy(), axis=1) == y_test))
    if hvd.rank() == 0:
        print("test accuracy %.3f; weights identical on all %d ranks: %s"
              % (accuracy, hvd.size(), same), flush=True)
    if not same:
        raise SystemExit("ranks ended with different weights")


if __name__ == "__main__":
    main()
