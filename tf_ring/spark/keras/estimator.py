"""KerasEstimator: fit a Keras model to a Spark DataFrame on tf_ring ranks.

fit(df) writes the DataFrame's feature and label columns as Parquet under
`store` (one file per rank; a validation split beside it), runs the training
function on `num_proc` ranks through tf_ring.spark.run, and returns a
KerasModel holding rank 0's weights."""
import os
import uuid

from tf_ring.spark.keras import columns as cols
from tf_ring.spark.keras import remote
from tf_ring.spark.keras import spec as specs
from tf_ring.spark.keras import store as stores
from tf_ring.spark.keras.model import KerasModel


class KerasEstimator:
    """Horovod's names: num_proc, model, optimizer, loss, metrics,
    feature_cols (one per model input), label_cols (one per model output),
    batch_size (per rank), epochs, validation (a fraction of the rows, or
    the name of a column that is true on validation rows), store (a
    directory the driver and every executor see under this name, e.g. a
    shared filesystem), callbacks (Keras callbacks, run on every rank),
    shuffle, random_seed, verbose, custom_objects, run_id (the directory
    under store; default a fresh one), store_mode ("private", the default:
    the run directory 0700 and its files 0600; "group": 2770 and 0660, for
    a store a group shares). start_timeout, env and nics go to
    tf_ring.spark.run."""

    def __init__(self, num_proc=None, model=None, optimizer=None, loss=None, metrics=None,
                 feature_cols=None, label_cols=None, batch_size=32, epochs=1, validation=None,
                 store=None, callbacks=None, shuffle=True, random_seed=0, verbose=1,
                 custom_objects=None, run_id=None, start_timeout=600, env=None, nics=None,
                 store_mode="private"):
        for name, value in (("model", model), ("optimizer", optimizer), ("loss", loss),
                            ("store", store)):
            if value is None:
                raise ValueError("KerasEstimator needs %s=%s" % (name, _HINTS[name]))
        if not feature_cols or not label_cols:
            raise ValueError("KerasEstimator needs feature_cols and label_cols: lists of column "
                             "names, one per model input and one per model output")
        if len(feature_cols) != len(model.inputs) or len(label_cols) != len(model.outputs):
            raise ValueError("KerasEstimator: the model has %d input(s) and %d output(s); "
                             "feature_cols names %d and label_cols %d (one column each)"
                             % (len(model.inputs), len(model.outputs), len(feature_cols),
                                len(label_cols)))
        if validation is not None and not isinstance(validation, str) \
                and not 0 < float(validation) < 1:
            raise ValueError("KerasEstimator: validation=%r must be a fraction between 0 and 1 "
                             "or a column name" % (validation,))
        self.num_proc, self.batch_size, self.epochs = num_proc, int(batch_size), int(epochs)
        self.feature_cols, self.label_cols = list(feature_cols), list(label_cols)
        self.validation, self.store, self.run_id = validation, store, run_id
        self.store_mode = stores.check_mode(store_mode)
        self.callbacks, self.shuffle, self.random_seed = list(callbacks or []), shuffle, random_seed
        self.verbose, self.start_timeout, self.env, self.nics = verbose, start_timeout, env, nics
        self._model = specs.model_spec(model, custom_objects)
        self._compile = specs.serialize_compile(optimizer, loss, metrics)

    def fit(self, df):
        """Trains on `df`; returns a KerasModel (rank 0's weights, the
        job's history, the rows each rank read)."""
        import tf_ring.spark
        cols.check_present(df, self.feature_cols, "feature column(s)")
        cols.check_present(df, self.label_cols, "label column(s)")
        num_proc = self.num_proc or df.sparkSession.sparkContext.defaultParallelism
        run_dir = os.path.join(self.store, self.run_id or "tf_ring-fit-" + uuid.uuid4().hex[:12])
        stores.make_run_dir(run_dir, self.store_mode)
        train, val = self._split(df)
        train_rows = _write(train, os.path.join(run_dir, "train"), num_proc)
        val_rows = _write(val, os.path.join(run_dir, "val"), num_proc) if val is not None else None
        stores.settle_modes(run_dir, self.store_mode)
        check_row_counts(train_rows, val_rows, num_proc, self.validation)
        per_step = self.batch_size * num_proc
        spec = {"model": self._model, "compile": self._compile,
                "feature_cols": self.feature_cols, "label_cols": self.label_cols,
                "train_path": os.path.join(run_dir, "train"),
                "val_path": os.path.join(run_dir, "val") if val_rows else None,
                # Every rank takes the same number of steps (its data repeats):
                # a rank that stopped early would leave the others waiting.
                "steps_per_epoch": max(1, train_rows // per_step),
                "validation_steps": max(1, (val_rows or 0) // per_step),
                "batch_size": self.batch_size, "epochs": self.epochs, "shuffle": self.shuffle,
                "seed": int(self.random_seed), "callbacks": self.callbacks,
                "verbose": self.verbose}
        results = tf_ring.spark.run(remote.train, args=(spec,), num_proc=num_proc,
                                    start_timeout=self.start_timeout, env=self.env,
                                    verbose=self.verbose, nics=self.nics)
        digests = {r["digest"] for r in results}
        if len(digests) != 1:
            raise RuntimeError("KerasEstimator: the ranks ended with different trainable weights "
                               "(%d distinct); tf_ring's broadcast or gradient averaging failed"
                               % len(digests))
        trained = dict(self._model, weights=results[0]["weights"])
        return KerasModel(trained, self.feature_cols, self.label_cols,
                          history=results[0]["history"],
                          rows_per_rank=[r["rows"] for r in results], run_dir=run_dir)

    def _split(self, df):
        needed = self.feature_cols + self.label_cols
        if isinstance(self.validation, str):
            cols.check_present(df, [self.validation], "validation column")
            flag = df[self.validation].cast("boolean")
            return (_arrays(df.filter(~flag), needed), _arrays(df.filter(flag), needed))
        data = _arrays(df, needed)
        if self.validation is None:
            return data, None
        v = float(self.validation)
        train, val = data.randomSplit([1 - v, v], seed=int(self.random_seed))
        return train, val


def _arrays(df, names):
    return df.select(*[cols.as_array(df, c) for c in names])


def check_row_counts(train_rows, val_rows, num_proc, validation):
    """Every rank reads at least one file of training rows and, with
    validation, one of validation rows (the writer deals the rows round robin
    into one file per rank, so fewer rows than ranks leaves a file empty)."""
    if train_rows < num_proc:
        raise ValueError("KerasEstimator: %d training rows for %d ranks; each rank needs at "
                         "least one" % (train_rows, num_proc))
    if val_rows is not None and val_rows < num_proc:
        raise ValueError("KerasEstimator: validation=%r gives %d validation rows for %d ranks; "
                         "each rank needs at least one. Flag (or hold out) at least %d rows, or "
                         "pass validation=None" % (validation, val_rows, num_proc, num_proc))


def _write(df, path, num_proc):
    """Writes `df` as num_proc Parquet files (Spark's round-robin repartition
    keeps them within a row of each other); returns the row count."""
    import pyarrow.dataset as ds
    df.repartition(num_proc).write.mode("overwrite").parquet(path)
    return ds.dataset(path, format="parquet").count_rows()


_HINTS = {"model": "<a keras.Model (Sequential or functional)>",
          "optimizer": "<a keras optimizer or its name>", "loss": "<a loss or its name>",
          "store": "<a directory the driver and every executor see, e.g. on a shared "
                   "filesystem>"}
