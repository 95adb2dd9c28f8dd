"""A Spark driver for the tests: runs Keras 3 digits training (scikit-learn's
bundled digits, nothing downloaded) through tf_ring.spark.run, and a job
whose rank 1 raises, on the Spark master given; prints one JSON line per
run for the test to check.

    python digits_on_spark.py MASTER RANKS[,RANKS...] [--driver-host ADDR] [--nics NET]
                              [--estimator RANKS[,RANKS...] --store DIR]
"""
import argparse
import io
import json
import os
import socket
import sys
import time


def train_digits(epochs):
    """Every rank starts from its own random weights; tf_ring's broadcast and
    averaged gradients must leave them equal."""
    import numpy as np
    from sklearn.datasets import load_digits
    import keras
    import tf_ring.keras as hvd

    hvd.init()
    keras.utils.set_random_seed(1000 + hvd.rank())
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[..., None]
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(x))
    x, y = x[order], y[order]
    split = int(0.8 * len(x))
    model = keras.Sequential([
        keras.Input((8, 8, 1)),
        keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
        keras.layers.Flatten(),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ])
    initial = [w.copy() for w in model.get_weights()]
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.003 * hvd.size())),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x[:split][hvd.rank()::hvd.size()], y[:split][hvd.rank()::hvd.size()],
              batch_size=32, epochs=epochs, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    _, accuracy = model.evaluate(x[split:], y[split:], verbose=0)
    return {"rank": hvd.rank(), "size": hvd.size(), "local_size": hvd.local_size(),
            "host": socket.gethostname(), "accuracy": float(accuracy),
            "initial": initial, "weights": model.get_weights()}


def fail_on_rank_one():
    import tf_ring.keras as hvd
    hvd.init()
    if hvd.rank() == 1:
        raise ValueError("rank 1 refuses to train")
    return hvd.rank()


def summary(results):
    """What the test checks, computed here from every rank's own weights."""
    import numpy as np
    first = results[0]["weights"]
    return {"ranks": [r["rank"] for r in results], "sizes": [r["size"] for r in results],
            "local_sizes": [r["local_size"] for r in results],
            "hosts": [r["host"] for r in results],
            "accuracy": [r["accuracy"] for r in results],
            "starts_differ": not all(np.array_equal(a, b) for a, b in
                                     zip(results[0]["initial"], results[1]["initial"])),
            "max_weight_difference": max(float(np.max(np.abs(a - b))) for r in results[1:]
                                         for a, b in zip(first, r["weights"]))}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("master")
    parser.add_argument("ranks", help="comma-separated rank counts, one digits run each")
    parser.add_argument("--driver-host", default=None)
    parser.add_argument("--nics", default=None)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--estimator", default="",
                        help="comma-separated rank counts, one KerasEstimator fit each")
    parser.add_argument("--store", default=None, help="the estimator's store directory")
    args = parser.parse_args()
    # The executors' Python workers run this environment's Python, where tf_ring is.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    import tf_ring.spark
    from tf_ring.hosted.job import JobFailed

    builder = SparkSession.builder.master(args.master).appName("tf_ring-tests")
    builder = builder.config("spark.ui.enabled", "false").config("spark.executor.memory", "512m")
    if args.driver_host:
        builder = builder.config("spark.driver.host", args.driver_host)
        builder = builder.config("spark.driver.bindAddress", args.driver_host)
    started = time.time()
    spark = builder.getOrCreate()
    print(json.dumps({"session_start_s": time.time() - started}), flush=True)
    for ranks in map(int, args.ranks.split(",")):
        started = time.time()
        results = tf_ring.spark.run(train_digits, args=(args.epochs,), num_proc=ranks,
                                    nics=args.nics, start_timeout=180)
        print(json.dumps(dict(summary(results), run="digits", num_proc=ranks,
                              seconds=time.time() - started)), flush=True)
    started = time.time()
    stderr = io.StringIO()
    try:
        tf_ring.spark.run(fail_on_rank_one, num_proc=2, nics=args.nics, stderr=stderr,
                          start_timeout=180)
        outcome = {"raised": None}
    except JobFailed as e:
        outcome = {"raised": str(e), "failed_ranks": sorted(e.errors)}
    print(json.dumps(dict(outcome, run="fails", seconds=time.time() - started)), flush=True)
    for ranks in [int(r) for r in args.estimator.split(",") if r]:
        import estimator_runs
        started = time.time()
        print(json.dumps(dict(estimator_runs.run_estimator(spark, ranks, args.store),
                              seconds=time.time() - started)), flush=True)
        started = time.time()
        print(json.dumps(dict(estimator_runs.run_too_few_validation_rows(spark, ranks, args.store),
                              seconds=time.time() - started)), flush=True)
    spark.stop()


if __name__ == "__main__":
    sys.exit(main())
