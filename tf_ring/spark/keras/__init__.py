"""Fit Keras models to Spark DataFrames on tf_ring ranks, as Horovod's
horovod.spark.keras did (docs/spark-ray-kubernetes.md#kerasestimator):

    from tf_ring.spark.keras import KerasEstimator
    estimator = KerasEstimator(num_proc=2, model=model, optimizer="adam",
                               loss="sparse_categorical_crossentropy",
                               feature_cols=["features"], label_cols=["label"],
                               batch_size=32, epochs=5, store="/shared/tf_ring")
    trained = estimator.fit(train_df)
    predictions = trained.transform(test_df)  # adds label__output

The rows travel as Parquet files under `store` (pyarrow reads each rank's;
no Petastorm). pyspark, pyarrow and pandas are imported when used."""
from tf_ring.spark.keras.estimator import KerasEstimator
from tf_ring.spark.keras.model import KerasModel

__all__ = ["KerasEstimator", "KerasModel"]
