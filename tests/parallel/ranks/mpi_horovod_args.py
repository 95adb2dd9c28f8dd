"""Horovod's deprecated-but-public arguments: `average=` maps to Average/Sum
with a DeprecationWarning and may not be combined with `op=`; device and
name-scope arguments are accepted and change nothing. Checked on every rank
against NumPy sums of the recomputed inputs."""
import numpy as np
import pytest
import tensorflow as tf

import tf_ring as hvd
from helpers import all_inputs


def inputs_and_sum(seed):
    inputs = all_inputs((4,), tf.float64, seed=seed)
    return tf.constant(inputs[hvd.rank()]), np.sum(inputs, axis=0)


@pytest.mark.parametrize("average", [True, False], ids=["avg", "sum"])
def test_average_argument_maps_to_op_with_a_deprecation_warning(average):
    x, total = inputs_and_sum(seed=60)
    want = total / hvd.size() if average else total
    with pytest.warns(DeprecationWarning, match="average"):
        out = hvd.allreduce(x, average=average, name="dep_avg_%d" % average)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-12)
    with pytest.warns(DeprecationWarning, match="average"):
        outs = hvd.grouped_allreduce([x, 2 * x], average=average, name="dep_gavg_%d" % average)
    np.testing.assert_allclose(outs[1].numpy(), 2 * want, rtol=1e-12)


def test_op_and_average_together_is_an_error():
    x, _ = inputs_and_sum(seed=61)
    with pytest.raises(ValueError, match="supersedes average"):
        hvd.allreduce(x, average=True, op=hvd.Sum)
    with pytest.raises(ValueError, match="supersedes average"):
        hvd.grouped_allreduce([x], average=False, op=hvd.Average)


def test_op_none_means_average():
    x, total = inputs_and_sum(seed=62)
    np.testing.assert_allclose(hvd.allreduce(x, op=None, name="op_none").numpy(),
                               total / hvd.size(), rtol=1e-12)


def test_device_and_name_scope_arguments_change_nothing():
    x, total = inputs_and_sum(seed=63)
    with tf.name_scope("outer"):
        out = hvd.allreduce(x, device_dense="/cpu:0", device_sparse="/cpu:0", op=hvd.Sum,
                            ignore_name_scope=True, name="dev_args")
        gathered = hvd.allgather(x, name="dev_gather", ignore_name_scope=True)
        bcast = hvd.broadcast(x, 0, name="dev_bcast", ignore_name_scope=False)
        rs = hvd.reducescatter(tf.reshape(x, (4, 1)), device_dense="/cpu:0", op=hvd.Sum,
                               name="dev_rs", ignore_name_scope=True)
    np.testing.assert_allclose(out.numpy(), total, rtol=1e-12)
    assert gathered.shape == (4 * hvd.size(),)
    np.testing.assert_allclose(bcast.numpy(), all_inputs((4,), tf.float64, seed=63)[0])
    rows = 4 // hvd.size() + (1 if hvd.rank() < 4 % hvd.size() else 0)
    assert rs.shape == (rows, 1)


def test_reducescatter_with_fp16_compression_travels_as_float16():
    # 1 + 2**-12 is not a float16 number: it arrives as 1.0 only through float16.
    x = tf.constant([[1.0 + 2.0 ** -12]] * hvd.size(), tf.float64)
    out = hvd.reducescatter(x, compression=hvd.Compression.fp16, op=hvd.Average, name="rs_fp16")
    assert out.dtype == tf.float64
    np.testing.assert_array_equal(out.numpy(), [[1.0]])
