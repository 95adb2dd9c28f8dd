"""A rank's share of the Parquet files a KerasEstimator wrote: whole files,
dealt round robin (file i goes to rank i % size), read with pyarrow.dataset
into NumPy arrays shaped for the model, then a repeating tf.data pipeline.
No Petastorm: the files are plain Spark Parquet."""
import numpy as np


def my_files(path, rank, size):
    """The Parquet files under `path` this rank reads, in a fixed order every
    rank agrees on. Fewer files than ranks is refused (the writer makes at
    least one per rank)."""
    import pyarrow.dataset as ds
    files = sorted(ds.dataset(path, format="parquet").files)
    if len(files) < size:
        raise ValueError("KerasEstimator: %s holds %d Parquet files for %d ranks; every rank "
                         "needs at least one (the estimator writes one per rank)"
                         % (path, len(files), size))
    return files[rank::size]


def read_columns(files, columns):
    """{column: NumPy array with one row per record}; list columns become
    2-D arrays (every row must hold as many values)."""
    import pyarrow.dataset as ds
    table = ds.dataset(files, format="parquet").to_table(columns=list(columns))
    return {c: column_array(table.column(c).combine_chunks(), c) for c in columns}


def check_rows(read, columns, path, rank):
    """The number of rows read_columns() gave this rank; none is refused
    here, naming the files, before shaping would blame a column."""
    rows = len(read[columns[0]])
    if rows == 0:
        raise ValueError("KerasEstimator: rank %d's Parquet files under %s hold no rows; every "
                         "rank needs at least one (fewer rows than ranks were written there)"
                         % (rank, path))
    return rows


def column_array(array, name):
    import pyarrow as pa
    if pa.types.is_list(array.type) or pa.types.is_large_list(array.type):
        lengths = array.value_lengths().to_numpy(zero_copy_only=False)
        if len(lengths) and (lengths != lengths[0]).any():
            raise ValueError("KerasEstimator: column %r holds arrays of different lengths (%d to "
                             "%d); every row must match the model's input" %
                             (name, lengths.min(), lengths.max()))
        flat = array.flatten().to_numpy(zero_copy_only=False)
        return flat.reshape(len(array), -1 if len(array) else 0)
    return array.to_numpy(zero_copy_only=False)


def shaped(values, shape, name, role):
    """`values` (one row per record) reshaped to a model input or output of
    `shape` (without the batch dimension); float64 becomes float32."""
    values = np.asarray(values)
    if values.dtype == np.float64:
        values = values.astype(np.float32)
    wanted = tuple(shape)
    if None in wanted or not wanted:
        return values
    if int(np.prod(values.shape[1:])) != int(np.prod(wanted)):
        if role == "output":
            return values  # e.g. class ids for a softmax output: the loss decides
        raise ValueError("KerasEstimator: column %r has %s values per row; the model's %s wants "
                         "shape %s" % (name, int(np.prod(values.shape[1:])), role, wanted))
    return values.reshape((len(values),) + wanted)


def dataset(columns, feature_cols, label_cols, input_shapes, output_shapes, batch_size,
            shuffle, seed):
    """A repeating, batched tf.data.Dataset of (features, labels) from
    read_columns()'s arrays; one element per model input/output, or the
    element itself for a model with one."""
    import tensorflow as tf
    features = [shaped(columns[c], s, c, "input") for c, s in zip(feature_cols, input_shapes)]
    labels = [shaped(columns[c], s, c, "output") for c, s in zip(label_cols, output_shapes)]
    data = tf.data.Dataset.from_tensor_slices((_one_or_tuple(features), _one_or_tuple(labels)))
    if shuffle:
        data = data.shuffle(min(len(features[0]), 10000), seed=seed, reshuffle_each_iteration=True)
    return data.repeat().batch(batch_size).prefetch(2)


def _one_or_tuple(arrays):
    return arrays[0] if len(arrays) == 1 else tuple(arrays)
