"""KerasModel: what KerasEstimator.fit returns. The trained Keras model
(getModel), the training history (getHistory), and transform(df), which adds
one prediction column per model output, `<label>__output` (array<float>),
computed in Spark tasks."""
from tf_ring.spark.keras import columns as cols
from tf_ring.spark.keras import spec as specs


class KerasModel:
    def __init__(self, model_spec, feature_cols, label_cols, history, rows_per_rank, run_dir,
                 output_cols=None):
        self._spec = model_spec
        self.feature_cols, self.label_cols = list(feature_cols), list(label_cols)
        self.output_cols = list(output_cols or [c + "__output" for c in label_cols])
        self.history, self.rows_per_rank, self.run_dir = history, rows_per_rank, run_dir

    def getModel(self):  # noqa: N802 - Horovod's and Spark ML's name
        """The trained keras.Model (rebuilt here from rank 0's weights)."""
        return specs.rebuild_model(self._spec)

    def getHistory(self):  # noqa: N802
        """{metric: [value per epoch]}, averaged over the ranks."""
        return self.history

    def transform(self, df):
        """`df` with the model's predictions added as `output_cols`."""
        from pyspark.sql import functions as F
        from pyspark.sql.functions import pandas_udf
        from pyspark.sql.types import ArrayType, FloatType, StructField, StructType
        cols.check_present(df, self.feature_cols, "feature column(s)")
        schema = StructType([StructField(c, ArrayType(FloatType())) for c in self.output_cols])
        predict = pandas_udf(_predictor(self._spec, self.feature_cols, self.output_cols),
                             schema)
        packed = "__tf_ring_predictions"
        out = df.withColumn(packed, predict(F.struct(*[cols.as_array(df, c)
                                                      for c in self.feature_cols])))
        for c in self.output_cols:
            out = out.withColumn(c, F.col(packed)[c])
        return out.drop(packed)


def _predictor(model_spec, feature_cols, output_cols):
    """The pandas UDF body: builds the model once per Spark task, then
    predicts batch by batch."""
    from typing import Iterator

    import pandas as pd

    def predict(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        import numpy as np
        from tf_ring.spark.keras import shards
        model = specs.rebuild_model(model_spec)
        shapes = [tuple(t.shape[1:]) for t in model.inputs]
        for batch in batches:
            inputs = [shards.shaped(_stack(batch[c]), s, c, "input")
                      for c, s in zip(feature_cols, shapes)]
            outputs = model.predict(inputs[0] if len(inputs) == 1 else inputs, verbose=0,
                                    batch_size=max(1, min(len(batch), 1024)))
            outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
            yield pd.DataFrame({c: [row for row in np.asarray(o, np.float32).reshape(len(batch), -1)]
                                for c, o in zip(output_cols, outputs)})
    return predict


def _stack(series):
    import numpy as np
    values = series.to_numpy()
    if len(values) and isinstance(values[0], (list, tuple, np.ndarray)):
        return np.stack([np.asarray(v) for v in values])
    return values
