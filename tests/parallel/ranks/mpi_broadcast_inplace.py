"""broadcast_ (in place), broadcast_global_variables and broadcast_object_fn.

Every rank starts from its own values (helpers.rank_input) and must end with
the root's, which every rank can recompute; the root is the last rank too,
not only rank 0."""
import numpy as np
import pytest
import tensorflow as tf

import tf_ring as hvd
from helpers import rank_input

DTYPES = [tf.float32, tf.float64, tf.int32, tf.int64, tf.float16]


def roots():
    return sorted({0, hvd.size() - 1})


SHAPES = [(3,), (2, 4), (), (5, 1), (4,)]


def expected_values(rank, seed):
    """Rank `rank`'s starting values (and so the result when it is the root)."""
    return [rank_input(rank, shape, dtype, seed=seed + i)
            for i, (shape, dtype) in enumerate(zip(SHAPES, DTYPES))]


def make_variables(rank, seed):
    return [tf.Variable(value) for value in expected_values(rank, seed)]


def assert_values(actual, expected):
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        a = a.numpy() if hasattr(a, "numpy") else a
        assert a.dtype == e.dtype and a.shape == e.shape
        np.testing.assert_array_equal(a, e)


@pytest.mark.parametrize("root_index", [0, 1])
def test_broadcast_inplace_eager(root_index):
    root = roots()[min(root_index, len(roots()) - 1)]
    variables = make_variables(hvd.rank(), seed=10)
    returned = hvd.broadcast_(variables, root_rank=root)
    assert_values(returned, expected_values(root, 10))
    assert_values(variables, expected_values(root, 10))


def test_broadcast_inplace_single_variable_and_name():
    var = tf.Variable(rank_input(hvd.rank(), (6,), tf.float32, seed=3))
    (value,) = hvd.broadcast_(var, root_rank=hvd.size() - 1, name="one_var")
    np.testing.assert_array_equal(value.numpy(), rank_input(hvd.size() - 1, (6,), tf.float32, seed=3))
    np.testing.assert_array_equal(var.numpy(), value.numpy())


def test_broadcast_inplace_in_tf_function():
    root = hvd.size() - 1
    variables = make_variables(hvd.rank(), seed=20)

    @tf.function
    def run():
        return hvd.broadcast_(variables, root_rank=root)

    assert_values(run(), expected_values(root, 20))
    assert_values(variables, expected_values(root, 20))


def test_broadcast_inplace_in_v1_graph():
    root = hvd.size() - 1
    with tf.Graph().as_default():
        variables = [tf.compat.v1.Variable(v, use_resource=use_resource)
                     for v, use_resource in zip(expected_values(hvd.rank(), 30),
                                                [True, False, True, False, True])]
        values = hvd.broadcast_(variables, root_rank=root)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            returned = session.run(values)
            after = session.run(variables)
    assert_values(returned, expected_values(root, 30))
    assert_values(after, expected_values(root, 30))


def test_broadcast_global_variables_in_v1_graph():
    root = hvd.size() - 1
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable("w", initializer=rank_input(hvd.rank(), (3, 2), tf.float32))
        step = tf.compat.v1.train.get_or_create_global_step()
        local = tf.compat.v1.Variable(float(hvd.rank()), collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES])
        op = hvd.broadcast_global_variables(root)
        assert isinstance(op, tf.Operation)
        with tf.compat.v1.Session() as session:
            # Two runs: within one session.run the initializer may run after the assign.
            session.run([tf.compat.v1.global_variables_initializer(),
                         tf.compat.v1.local_variables_initializer()])
            session.run(step.assign(7 * hvd.rank()))
            session.run(op)
            w_value, step_value, local_value = session.run([w, step, local])
    np.testing.assert_array_equal(w_value, rank_input(root, (3, 2), tf.float32))
    assert step_value == 7 * root
    assert local_value == float(hvd.rank())  # not a global variable: untouched


def test_broadcast_global_variables_eagerly_raises_runtime_error():
    with pytest.raises(RuntimeError, match="graph mode.*broadcast_variables"):
        hvd.broadcast_global_variables(0)


def test_broadcast_object_fn_returns_the_roots_object_each_call():
    root = hvd.size() - 1
    bcast = hvd.broadcast_object_fn(root_rank=root)
    for epoch in range(3):
        mine = {"rank": hvd.rank(), "epoch": epoch, "payload": list(range(hvd.rank() * epoch))}
        got = bcast(mine)
        assert got == {"rank": root, "epoch": epoch, "payload": list(range(root * epoch))}
    named = hvd.broadcast_object_fn(name="named_fn", session=None)
    assert named(("from", hvd.rank())) == ("from", 0)
