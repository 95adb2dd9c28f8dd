"""KerasEstimator runs for tests/integration/test_spark.py (called by digits_on_spark.py
in the driver's session): scikit-learn's bundled digits as a DataFrame
(pixels as an ML vector, so the vector-to-array path runs; every fifth row
held out for validation by a column; a separate test set), fit on N ranks,
then transform. Returns what the test checks, computed here independently
of the estimator: the rows it should have read, and the trained model's
predictions made on the driver. The model has a BatchNormalization layer.
Also a fit whose validation column is true on fewer rows than ranks."""
import os
import stat

import numpy as np

EPOCHS = 4


def digits_frames(spark):
    from pyspark.ml.linalg import Vectors
    from sklearn.datasets import load_digits
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float64)
    order = np.random.default_rng(0).permutation(len(x))
    rows = [(int(i), Vectors.dense(x[i]), int(digits.target[i]), bool(n % 5 == 0))
            for n, i in enumerate(order)]
    test, fit = rows[:300], rows[300:]
    columns = ["id", "features", "label", "is_val"]
    return spark.createDataFrame(fit, columns), spark.createDataFrame(test, columns), fit, test


def model():
    import keras
    keras.utils.set_random_seed(7)
    return keras.Sequential([
        keras.Input((8, 8, 1)),  # the 64 pixels come as one array column: reshaped per row
        keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
        # Its moving statistics stay each rank's own; fit compares the
        # trainable weights (before issue 49 it failed on any such model).
        keras.layers.BatchNormalization(),
        keras.layers.Flatten(),
        keras.layers.Dense(10, activation="softmax"),
    ])


def run_estimator(spark, ranks, store):
    import keras
    from tf_ring.spark.keras import KerasEstimator
    fit_df, test_df, fit_rows, test_rows = digits_frames(spark)
    estimator = KerasEstimator(num_proc=ranks, model=model(),
                               optimizer=keras.optimizers.Adam(0.01),
                               loss="sparse_categorical_crossentropy", metrics=["accuracy"],
                               feature_cols=["features"], label_cols=["label"],
                               validation="is_val", batch_size=16, epochs=EPOCHS, store=store,
                               verbose=0)
    trained = estimator.fit(fit_df)
    net = trained.getModel()
    x_test = np.array([r[1].toArray() for r in test_rows], np.float32).reshape(-1, 8, 8, 1)
    y_test = np.array([r[2] for r in test_rows])
    expected = net.predict(x_test, verbose=0)
    predicted = {row["id"]: np.array(row["label__output"]) for row in
                 trained.transform(test_df).select("id", "label__output").collect()}
    got = np.stack([predicted[r[0]] for r in test_rows])
    history = trained.getHistory()
    return {"run": "estimator", "num_proc": ranks,
            "rows_per_rank": trained.rows_per_rank,
            "train_rows": sum(1 for r in fit_rows if not r[3]),
            "epochs": {k: len(v) for k, v in history.items()},
            "loss_fell": history["loss"][-1] < history["loss"][0],
            "test_accuracy": float(np.mean(expected.argmax(1) == y_test)),
            "transform_rows": len(predicted),
            "transform_max_difference": float(np.max(np.abs(got - expected))),
            "store_modes": store_modes(trained.run_dir)}


def store_modes(run_dir):
    """{"run dir": its mode, "dirs"/"files": the modes found below it} (octal text)."""
    found = {"run dir": ["%o" % stat.S_IMODE(os.stat(run_dir).st_mode)], "dirs": set(),
             "files": set()}
    for folder, dirs, files in os.walk(run_dir):
        for kind, names in (("dirs", dirs), ("files", files)):
            found[kind].update("%o" % stat.S_IMODE(os.lstat(os.path.join(folder, n)).st_mode)
                               for n in names)
    return {k: sorted(v) for k, v in found.items()}



def run_too_few_validation_rows(spark, ranks, store):
    """fit with the validation column true on ranks - 1 rows: before issue
    49 a rank's validation file came out empty and every rank failed with
    "column 'features' has 0 values per row". Returns what fit raised."""
    import keras
    from pyspark.sql import functions as F
    from tf_ring.spark.keras import KerasEstimator
    fit_df, _, fit_rows, _ = digits_frames(spark)
    few = fit_df.withColumn("is_val", F.col("id").isin([r[0] for r in fit_rows[:ranks - 1]]))
    estimator = KerasEstimator(num_proc=ranks, model=model(),
                               optimizer=keras.optimizers.Adam(0.01),
                               loss="sparse_categorical_crossentropy",
                               feature_cols=["features"], label_cols=["label"],
                               validation="is_val", batch_size=16, epochs=1, store=store,
                               verbose=0)
    try:
        estimator.fit(few)
        raised = None
    except Exception as e:  # noqa: BLE001 (the test reads its type and text)
        raised = "%s: %s" % (type(e).__name__, e)
    return {"run": "few_validation_rows", "num_proc": ranks, "raised": raised}
