"""Data-parallel Keras training of a small convolutional classifier with tf_ring.

Keras 3 by default; with --tf-keras the same model on legacy tf_keras
(Keras 2, TF_USE_LEGACY_KERAS=1), e.g. for code migrated from Horovod on
TF <= 2.15.

Data: scikit-learn's bundled handwritten digits (sklearn.datasets.load_digits:
1,797 8x8 grey images, 10 classes). The data ships inside scikit-learn, so
nothing is downloaded. The last 20% of the images are the test set.

Run:  tfringrun -np 2 python keras_examples/keras_digits.py [--tf-keras]
"""
import argparse
import os

import numpy as np
from sklearn.datasets import load_digits


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.002, help="single-process learning rate")
    parser.add_argument("--checkpoint-dir", default="./checkpoints")
    parser.add_argument("--tf-keras", action="store_true",
                        help="train with legacy tf_keras (Keras 2) instead of Keras 3")
    return parser.parse_args()


def import_keras(legacy):
    """Keras 3, or tf_keras; for tf_keras, tf.keras must resolve to it too,
    which TF_USE_LEGACY_KERAS does only if set before TensorFlow is imported."""
    if legacy:
        os.environ["TF_USE_LEGACY_KERAS"] = "1"
        import tf_keras as keras
    else:
        import keras
    return keras


def load_data():
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[..., None]
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(x))  # same on every rank
    x, y = x[order], y[order]
    split = int(0.8 * len(x))
    return (x[:split], y[:split]), (x[split:], y[split:])


def build_model(keras):
    return keras.Sequential([
        keras.Input((8, 8, 1)),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dropout(0.25),
        keras.layers.Dense(10, activation="softmax"),
    ])


def main():
    args = parse_args()
    keras = import_keras(args.tf_keras)
    import tf_ring.keras as hvd  # after import_keras: it imports TensorFlow

    hvd.init()
    (x_train, y_train), (x_test, y_test) = load_data()
    # Each rank trains on its own slice of the training set.
    x_train, y_train = x_train[hvd.rank()::hvd.size()], y_train[hvd.rank()::hvd.size()]

    model = build_model(keras)
    # The global batch grows with the number of ranks, so does the learning rate;
    # the warmup callback ramps up to it.
    scaled_lr = args.lr * hvd.size()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(scaled_lr)),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])

    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.MetricAverageCallback(),
        hvd.callbacks.LearningRateWarmupCallback(scaled_lr, warmup_epochs=2,
                                                 verbose=1 if hvd.rank() == 0 else 0),
    ]
    if hvd.rank() == 0:
        os.makedirs(args.checkpoint_dir, exist_ok=True)
        checkpoint = "tf_keras_digits.h5" if args.tf_keras else "keras_digits.keras"
        callbacks.append(keras.callbacks.ModelCheckpoint(os.path.join(args.checkpoint_dir, checkpoint)))

    model.fit(x_train, y_train, batch_size=args.batch_size, epochs=args.epochs,
              callbacks=callbacks, verbose=1 if hvd.rank() == 0 else 0)

    _, accuracy = model.evaluate(x_test, y_test, verbose=0)
    weights = model.get_weights()
    same = all(all(np.array_equal(a, b) for a, b in zip(weights, other))
               for other in hvd.allgather_object(weights))
    if hvd.rank() == 0:
        print("test accuracy: %.4f (%d ranks, %s); weights identical on every rank: %s"
              % (accuracy, hvd.size(), "tf_keras" if args.tf_keras else "Keras 3", same))
    if not same:
        raise SystemExit("ranks ended with different weights")


if __name__ == "__main__":
    main()
