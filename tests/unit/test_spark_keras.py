"""tf_ring.spark.keras's pieces that need no Spark: the spec that carries a
model and its compile arguments to the ranks, each rank's share of the
Parquet files (written here with pyarrow as Spark would), and the
estimator's refusals of bad arguments. The estimator end to end on a Spark
cluster: tests/integration/test_spark.py."""
import numpy as np
import pytest

pa = pytest.importorskip("pyarrow", reason="pyarrow is in the [spark] and [test] extras")
import pyarrow.parquet as pq  # noqa: E402

from tf_ring.spark.keras import shards  # noqa: E402
from tf_ring.spark.keras import spec as specs  # noqa: E402


def small_model():
    import keras
    keras.utils.set_random_seed(3)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])


def test_a_model_and_its_compile_arguments_survive_the_trip():
    import keras
    model = small_model()
    sent = specs.model_spec(model)
    rebuilt = specs.rebuild_model(sent)
    x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    np.testing.assert_array_equal(rebuilt.predict(x, verbose=0), model.predict(x, verbose=0))
    config = specs.serialize_compile(keras.optimizers.SGD(0.25, momentum=0.5),
                                     keras.losses.SparseCategoricalCrossentropy(),
                                     ["accuracy", keras.metrics.SparseTopKCategoricalAccuracy(2)])
    optimizer, loss, metrics = specs.deserialize_compile(config, {})
    assert isinstance(optimizer, keras.optimizers.SGD)
    assert float(optimizer.learning_rate) == 0.25 and optimizer.momentum == 0.5
    assert isinstance(loss, keras.losses.SparseCategoricalCrossentropy)
    assert metrics[0] == "accuracy" and metrics[1].k == 2
    assert specs.serialize_compile("adam", "mse", None)["loss"] == "mse"
    # The digest tells equal weights from different ones.
    assert specs.weights_digest(model.get_weights()) == specs.weights_digest(rebuilt.get_weights())
    assert specs.weights_digest(model.get_weights()) != \
        specs.weights_digest(small_model().get_weights()[::-1])


def test_the_digest_covers_what_must_agree_not_moving_statistics():
    """Issue 49: BatchNormalization's moving mean and variance are updated by
    each rank from its own batches (as in Horovod), so two ranks' models
    differ there after training while their trainable weights agree. The
    estimator compares the trainable weights only."""
    import keras
    keras.utils.set_random_seed(5)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4),
                              keras.layers.BatchNormalization(), keras.layers.Dense(2)])
    other = specs.rebuild_model(specs.model_spec(model))
    x = np.random.default_rng(1).normal(size=(16, 4)).astype(np.float32)
    other(x, training=True)  # updates other's moving statistics only
    assert specs.weights_digest(model.get_weights()) != specs.weights_digest(other.get_weights())
    assert specs.weights_digest(specs.trainable_weights(model)) == \
        specs.weights_digest(specs.trainable_weights(other))
    other.layers[0].kernel.assign(other.layers[0].kernel + 1.0)
    assert specs.weights_digest(specs.trainable_weights(model)) != \
        specs.weights_digest(specs.trainable_weights(other))


def write_parts(path, parts):
    """One Parquet file per part, named as Spark names them."""
    path.mkdir()
    for i, (ids, pixels) in enumerate(parts):
        table = pa.table({"id": pa.array(ids, pa.int64()),
                          "pixels": pa.array(pixels, pa.list_(pa.float32()))})
        pq.write_table(table, str(path / ("part-%05d-x.snappy.parquet" % i)))


@pytest.mark.parametrize("size", [2, 3])
def test_each_rank_reads_its_own_files_and_together_every_row_once(tmp_path, size):
    parts = [([3 * i + j for j in range(3)], [[float(3 * i + j)] * 4 for j in range(3)])
             for i in range(5)]
    write_parts(tmp_path / "train", parts)
    seen = []
    for rank in range(size):
        files = shards.my_files(str(tmp_path / "train"), rank, size)
        assert len(files) == len(range(rank, 5, size))
        read = shards.read_columns(files, ["id", "pixels"])
        assert read["pixels"].shape == (3 * len(files), 4)
        # Each row's pixels are its id: the columns stayed aligned.
        assert (read["pixels"] == read["id"][:, None]).all()
        seen += list(read["id"])
    assert sorted(seen) == list(range(15))


def test_a_dataset_is_shaped_for_the_model_and_repeats(tmp_path):
    write_parts(tmp_path / "train", [([0, 1, 2], [[0.0] * 4, [1.0] * 4, [2.0] * 4])])
    read = shards.read_columns(shards.my_files(str(tmp_path / "train"), 0, 1), ["id", "pixels"])
    data = shards.dataset(read, ["pixels"], ["id"], [(2, 2, 1)], [(3,)], batch_size=2,
                          shuffle=False, seed=0)
    batches = list(data.take(3).as_numpy_iterator())
    assert batches[0][0].shape == (2, 2, 2, 1) and batches[0][0].dtype == np.float32
    assert [list(b[1]) for b in batches] == [[0, 1], [2, 0], [1, 2]]  # repeats past the end


def test_bad_shards_say_what_is_wrong(tmp_path):
    write_parts(tmp_path / "few", [([0], [[1.0, 2.0]])])
    with pytest.raises(ValueError, match="holds 1 Parquet files for 2 ranks"):
        shards.my_files(str(tmp_path / "few"), 0, 2)
    write_parts(tmp_path / "ragged", [([0, 1], [[1.0, 2.0], [3.0]])])
    with pytest.raises(ValueError, match="column 'pixels' holds arrays of different lengths"):
        shards.read_columns(shards.my_files(str(tmp_path / "ragged"), 0, 1), ["pixels"])
    with pytest.raises(ValueError, match=r"column 'pixels' has 3 values per row; the model's "
                                         r"input wants shape \(2, 2\)"):
        shards.shaped(np.zeros((4, 3)), (2, 2), "pixels", "input")


def test_a_rank_with_no_validation_rows_is_told_so(tmp_path):
    """Issue 49: a validation column true on fewer rows than ranks left a
    rank's validation file empty, and every rank failed with "column
    'pixels' has 0 values per row". The driver refuses such a split first,
    as it refuses too few training rows, and a rank reading an empty share
    says that it is empty."""
    from tf_ring.spark.keras.estimator import check_row_counts
    check_row_counts(10, 3, 3, "is_val")
    check_row_counts(10, None, 3, None)
    with pytest.raises(ValueError, match=r"validation='is_val' gives 1 validation rows for 3 "
                                         r"ranks; each rank needs at least one"):
        check_row_counts(10, 1, 3, "is_val")
    with pytest.raises(ValueError, match="2 training rows for 3 ranks"):
        check_row_counts(2, 3, 3, 0.5)
    write_parts(tmp_path / "val", [([], []), ([4], [[1.0] * 4])])
    files = shards.my_files(str(tmp_path / "val"), 0, 2)
    read = shards.read_columns(files, ["pixels", "id"])
    with pytest.raises(ValueError, match=r"rank 0's Parquet files under .*val hold no rows"):
        shards.check_rows(read, ["pixels", "id"], str(tmp_path / "val"), 0)
    assert shards.check_rows(shards.read_columns(shards.my_files(str(tmp_path / "val"), 1, 2),
                                                 ["pixels", "id"]),
                             ["pixels", "id"], str(tmp_path / "val"), 1) == 1


def test_the_estimator_refuses_bad_arguments_naming_them():
    from tf_ring.spark.keras import KerasEstimator
    from tf_ring.spark.keras import columns
    model = small_model()
    ok = dict(model=model, optimizer="adam", loss="mse", feature_cols=["x"], label_cols=["y"],
              store="/shared")
    with pytest.raises(ValueError, match="KerasEstimator needs store="):
        KerasEstimator(**dict(ok, store=None))
    with pytest.raises(ValueError, match=r"the model has 1 input\(s\) and 1 output\(s\); "
                                         r"feature_cols names 2"):
        KerasEstimator(**dict(ok, feature_cols=["x", "z"]))
    with pytest.raises(ValueError, match="validation=1.5 must be a fraction"):
        KerasEstimator(**dict(ok, validation=1.5))

    class Frame:
        columns = ["x", "label"]
    with pytest.raises(ValueError, match=r"label column\(s\) 'y' not in the DataFrame \(its "
                                         r"columns: x, label\)"):
        columns.check_present(Frame(), ["y"], "label column(s)")
