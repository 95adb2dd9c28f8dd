"""Training throughput of a keras.applications model on synthetic data, with tf_ring.

Data: random images and labels made in memory (NumPy, fixed seed); the model is
built with weights=None, so nothing is downloaded. Small images keep it
practical on a CPU.

Run:  tfringrun -np 2 python keras_examples/keras_synthetic_benchmark.py
      tfringrun -np 2 python keras_examples/keras_synthetic_benchmark.py --model ResNet50 --image-size 64
"""
import argparse
import time

import numpy as np
import keras

import tf_ring.keras as hvd


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="MobileNetV2",
                        help="any keras.applications model name, e.g. MobileNetV2, ResNet50")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16, help="per rank")
    parser.add_argument("--num-warmup-batches", type=int, default=3)
    parser.add_argument("--num-batches-per-iter", type=int, default=5)
    parser.add_argument("--num-iters", type=int, default=5)
    return parser.parse_args()


def log(message):
    if hvd.rank() == 0:
        print(message, flush=True)


def main():
    args = parse_args()
    hvd.init()
    model = getattr(keras.applications, args.model)(
        weights=None, input_shape=(args.image_size, args.image_size, 3), classes=1000)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)),
                  loss="sparse_categorical_crossentropy")

    rng = np.random.default_rng(hvd.rank())
    images = rng.uniform(size=(args.batch_size, args.image_size, args.image_size, 3)).astype(
        np.float32)
    labels = rng.integers(0, 1000, size=(args.batch_size,))

    def run_batches(count):
        for _ in range(count):
            model.train_on_batch(images, labels)

    log("Model: %s, image size %d, batch size %d per rank, %d ranks"
        % (args.model, args.image_size, args.batch_size, hvd.size()))
    # Every rank starts from rank 0's weights, as in real training.
    callback = hvd.callbacks.BroadcastGlobalVariablesCallback(0)
    callback.set_model(model)
    callback.on_train_begin()
    run_batches(args.num_warmup_batches)

    rates = []
    for i in range(args.num_iters):
        start = time.perf_counter()
        run_batches(args.num_batches_per_iter)
        rate = args.batch_size * args.num_batches_per_iter / (time.perf_counter() - start)
        log("Iter #%d: %.1f img/sec per rank" % (i, rate))
        rates.append(rate)

    mean, conf = np.mean(rates), 1.96 * np.std(rates)
    log("Img/sec per rank: %.1f +-%.1f" % (mean, conf))
    log("Total img/sec on %d rank(s): %.1f +-%.1f" % (hvd.size(), hvd.size() * mean,
                                                      hvd.size() * conf))


if __name__ == "__main__":
    main()
