"""allreduce, allgather and broadcast: every dtype, reduce op and TF mode,
checked against NumPy on all ranks' recomputed inputs."""
import socket

import numpy as np
import pytest
import tensorflow as tf

import tf_ring as hvd
from helpers import all_inputs, rank_input

REDUCE_DTYPES = [tf.uint8, tf.int8, tf.uint16, tf.int16, tf.int32, tf.int64, tf.float16,
                 tf.bfloat16, tf.float32, tf.float64]
MOVE_DTYPES = REDUCE_DTYPES + [tf.bool]
OPS = {hvd.Sum: "sum", hvd.Average: "average", hvd.Min: "min", hvd.Max: "max",
       hvd.Product: "product"}


def expected_reduction(inputs, op, dtype, prescale=1.0, postscale=1.0):
    dtype = tf.as_dtype(dtype)
    if dtype.is_floating:
        stack = np.stack([x.astype(np.float64) * prescale for x in inputs])
    else:
        stack = np.stack([np.trunc(x.astype(np.float64) * prescale) for x in inputs])
    if op in (hvd.Sum, hvd.Average):
        out = stack.sum(0)
    elif op == hvd.Min:
        out = stack.min(0)
    elif op == hvd.Max:
        out = stack.max(0)
    else:
        out = stack.prod(0)
    if op == hvd.Average:
        out = out / len(inputs) if dtype.is_floating else np.trunc(out / len(inputs))
    out = out * postscale
    return out if dtype.is_floating else np.trunc(out)


def tolerance(dtype):
    return {tf.float16: 2e-2, tf.bfloat16: 5e-2}.get(tf.as_dtype(dtype), 1e-6)


def check_close(actual, expected, dtype):
    actual = tf.cast(actual, tf.float64).numpy()
    np.testing.assert_allclose(actual, expected, rtol=tolerance(dtype), atol=tolerance(dtype))


@pytest.mark.parametrize("dtype", REDUCE_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("op", list(OPS), ids=lambda o: OPS[o])
def test_allreduce_eager(dtype, op):
    low, high = (1, 4) if op == hvd.Product else (-8, 8)
    inputs = all_inputs((3, 5), dtype, seed=op, low=low, high=high)
    result = hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=op, name="ar_%s_%d" % (dtype.name, op))
    assert result.dtype == dtype and result.shape == (3, 5)
    check_close(result, expected_reduction(inputs, op, dtype), dtype)


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64, tf.float16, tf.int32], ids=lambda d: d.name)
def test_allreduce_scale_factors(dtype):
    inputs = all_inputs((17,), dtype, seed=7)
    result = hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=hvd.Sum, prescale_factor=0.5,
                           postscale_factor=3.0, name="scaled_" + dtype.name)
    check_close(result, expected_reduction(inputs, hvd.Sum, dtype, 0.5, 3.0), dtype)


def test_allreduce_default_is_average_and_scalar():
    result = hvd.allreduce(tf.constant(float(hvd.rank())))
    assert result.shape == ()
    assert result.numpy() == pytest.approx(np.mean(range(hvd.size())))


def test_allreduce_empty_tensor():
    result = hvd.allreduce(tf.zeros((0, 4)), op=hvd.Sum, name="empty")
    assert result.shape == (0, 4)


def test_allreduce_large_tensor():
    inputs = all_inputs((1 << 20,), tf.float32, seed=3)
    result = hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=hvd.Sum, name="large")
    check_close(result, expected_reduction(inputs, hvd.Sum, tf.float32), tf.float32)


@pytest.mark.parametrize("dtype", MOVE_DTYPES, ids=lambda d: d.name)
def test_allgather_uneven_first_dimension(dtype):
    # Rank r contributes r + 1 rows: the first dimension differs per rank.
    inputs = [rank_input(r, (r + 1, 2, 3), dtype, seed=11) for r in range(hvd.size())]
    result = hvd.allgather(tf.constant(inputs[hvd.rank()]), name="ag_" + dtype.name)
    np.testing.assert_array_equal(tf.cast(result, tf.float64).numpy() if dtype == tf.bfloat16
                                  else result.numpy(),
                                  np.concatenate([tf.cast(x, tf.float64).numpy() if dtype == tf.bfloat16
                                                  else x for x in inputs]))


def test_allgather_rank_with_no_rows():
    rows = 0 if hvd.rank() == 0 else 2
    result = hvd.allgather(tf.fill((rows, 3), float(hvd.rank())), name="ag_empty_rank")
    expected = np.concatenate([np.full((0 if r == 0 else 2, 3), float(r)) for r in range(hvd.size())])
    np.testing.assert_array_equal(result.numpy(), expected)


@pytest.mark.parametrize("dtype", MOVE_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("root", [0, 1])
def test_broadcast(dtype, root):
    inputs = all_inputs((4, 3), dtype, seed=root)
    result = hvd.broadcast(tf.constant(inputs[hvd.rank()]), root_rank=root,
                           name="bc_%s_%d" % (dtype.name, root))
    assert result.dtype == dtype
    np.testing.assert_array_equal(tf.cast(result, tf.float64).numpy(),
                                  tf.cast(tf.constant(inputs[root]), tf.float64).numpy())


def test_broadcast_from_last_rank():
    root = hvd.size() - 1
    result = hvd.broadcast(tf.constant([hvd.rank()] * 3), root_rank=root, name="bc_last")
    np.testing.assert_array_equal(result.numpy(), [root] * 3)


def test_many_named_collectives_in_one_tf_function():
    # Ten independent collectives in one graph: TF may start them in any order
    # on each rank; the coordinator must still pair them up by name.
    inputs = [all_inputs((8,), tf.float32, seed=100 + i) for i in range(10)]

    @tf.function
    def step(xs):
        return [hvd.allreduce(x, op=hvd.Sum, name="fn_%d" % i) for i, x in enumerate(xs)]

    for _ in range(3):
        outs = step([tf.constant(inp[hvd.rank()]) for inp in inputs])
        for inp, out in zip(inputs, outs):
            check_close(out, expected_reduction(inp, hvd.Sum, tf.float32), tf.float32)


def test_tf_function_unnamed_ops_and_allgather_shape():
    @tf.function
    def step(x):
        return hvd.allreduce(x, op=hvd.Max), hvd.allgather(x), hvd.broadcast(x, root_rank=0)

    x = tf.fill((2, 2), float(hvd.rank()))
    mx, gathered, bcast = step(x)
    assert mx.numpy().max() == hvd.size() - 1
    assert gathered.shape == (2 * hvd.size(), 2)
    np.testing.assert_array_equal(bcast.numpy(), np.zeros((2, 2)))


def test_tf_function_of_tensors_captured_from_outside():
    """Eager tensors made outside a tf.function and used in it (captured
    constants) have no name of their own; their placeholders are named after
    a process-wide id that differs here between ranks (each rank makes a
    different number of eager tensors first). The collectives must still pair up and reduce."""
    for _ in range(7 * hvd.rank()):
        tf.constant(0.0) + 1.0  # uneven eager history: ids shift per rank
    inputs = all_inputs((4,), tf.float32, seed=61)
    others = all_inputs((3,), tf.float32, seed=62)
    x, y = tf.constant(inputs[hvd.rank()]), tf.constant(others[hvd.rank()])

    @tf.function
    def step():
        return (hvd.allreduce(x, op=hvd.Sum), hvd.allreduce(y, op=hvd.Max),
                hvd.allgather(tf.reshape(x, [1, 4])), hvd.broadcast(y, root_rank=hvd.size() - 1))

    for _ in range(2):
        total, biggest, gathered, root_y = step()
        check_close(total, expected_reduction(inputs, hvd.Sum, tf.float32), tf.float32)
        check_close(biggest, expected_reduction(others, hvd.Max, tf.float32), tf.float32)
        np.testing.assert_array_equal(gathered.numpy(), np.stack(inputs))
        np.testing.assert_array_equal(root_y.numpy(), others[-1])


def test_v1_graph_session():
    with tf.Graph().as_default():
        x = tf.compat.v1.placeholder(tf.float32, shape=[3])
        summed = hvd.allreduce(x, op=hvd.Sum)
        gathered = hvd.allgather(tf.reshape(x, [1, 3]))
        root_value = hvd.broadcast(x, root_rank=1)
        with tf.compat.v1.Session() as sess:
            feed = {x: np.full(3, hvd.rank() + 1.0, np.float32)}
            s, g, b = sess.run([summed, gathered, root_value], feed_dict=feed)
    total = sum(r + 1.0 for r in range(hvd.size()))
    np.testing.assert_allclose(s, [total] * 3)
    np.testing.assert_allclose(g[:, 0], [r + 1.0 for r in range(hvd.size())])
    np.testing.assert_allclose(b, [2.0] * 3)


def test_same_tensor_or_name_twice_in_one_graph():
    """Two collectives of one tensor, or two with one name=, in one graph step
    (as Horovod allows: TF makes node names unique and so do collective names):
    both in flight at once, each with its own result."""
    inputs = all_inputs((5,), tf.float32, seed=41)
    others = all_inputs((5,), tf.float32, seed=42)

    def build(x, y):
        return (hvd.allreduce(x, op=hvd.Sum), hvd.allreduce(x, op=hvd.Max),
                hvd.allgather(x), hvd.allgather(x),
                hvd.allreduce(x, op=hvd.Sum, name="same"), hvd.allreduce(y, op=hvd.Min, name="same"))

    def check(outs):
        s, mx, g1, g2, named_sum, named_min = [np.asarray(o) for o in outs]
        tol = tolerance(tf.float32)
        for actual, expected in [(s, expected_reduction(inputs, hvd.Sum, tf.float32)),
                                 (mx, expected_reduction(inputs, hvd.Max, tf.float32)),
                                 (named_sum, expected_reduction(inputs, hvd.Sum, tf.float32)),
                                 (named_min, expected_reduction(others, hvd.Min, tf.float32))]:
            np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol)
        np.testing.assert_array_equal(g1, np.concatenate(inputs))
        np.testing.assert_array_equal(g2, np.concatenate(inputs))

    x, y = tf.constant(inputs[hvd.rank()]), tf.constant(others[hvd.rank()])
    step = tf.function(build)
    for _ in range(2):  # the second call runs the traced graph again
        check([o.numpy() for o in step(x, y)])
    with tf.Graph().as_default():
        outs = build(tf.constant(inputs[hvd.rank()]), tf.constant(others[hvd.rank()]))
        with tf.compat.v1.Session() as sess:
            for _ in range(2):
                check(sess.run(outs))


def test_allreduce_gradient_is_allreduce_of_gradient():
    w = tf.Variable(tf.ones(4))
    c = tf.constant(np.arange(4, dtype=np.float32) + hvd.rank())
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(hvd.allreduce(w * c, op=hvd.Sum, name="grad_ar"))
    grad = tape.gradient(loss, w)
    # d loss / d(input) = allreduce_sum(ones) = size; times this rank's c.
    np.testing.assert_allclose(grad.numpy(), hvd.size() * c.numpy())


def test_allgather_gradient_is_own_slice_of_averaged_gradient():
    size, rank = hvd.size(), hvd.rank()
    x = tf.Variable(tf.ones((rank + 1, 2)))
    total_rows = sum(r + 1 for r in range(size))
    weights = [np.arange(total_rows * 2, dtype=np.float32).reshape(total_rows, 2) * (r + 1)
               for r in range(size)]
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(hvd.allgather(x, name="grad_ag") * weights[rank])
    grad = tape.gradient(loss, x)
    begin = sum(r + 1 for r in range(rank))
    expected = np.mean(weights, axis=0)[begin:begin + rank + 1]
    np.testing.assert_allclose(grad.numpy(), expected, rtol=1e-6)


def test_broadcast_gradient_only_on_root():
    x = tf.Variable(tf.ones(3))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(hvd.broadcast(x, root_rank=1, name="grad_bc") * (hvd.rank() + 1.0))
    grad = tape.gradient(loss, x)
    expected = np.mean([r + 1.0 for r in range(hvd.size())]) if hvd.rank() == 1 else 0.0
    np.testing.assert_allclose(grad.numpy(), [expected] * 3)


def test_topology():
    """Expected values from every rank's host name (one machine or several):
    local = the ranks on my host; cross = the ranks with my local rank."""
    assert 0 <= hvd.rank() < hvd.size()
    ranks = hvd.allgather(tf.constant([hvd.rank()]), name="ranks").numpy()
    np.testing.assert_array_equal(ranks, np.arange(hvd.size()))
    name = np.frombuffer(socket.gethostname().encode().ljust(64, b" ")[:64], np.uint8)
    names = hvd.allgather(tf.constant(name[None, :]), name="host_names").numpy()
    host = [bytes(row).rstrip() for row in names]
    local = [r for r in range(hvd.size()) if host[r] == host[hvd.rank()]]
    local_rank_of = [[q for q in range(hvd.size()) if host[q] == host[r]].index(r)
                     for r in range(hvd.size())]
    cross = [r for r in range(hvd.size()) if local_rank_of[r] == local_rank_of[hvd.rank()]]
    assert (hvd.local_size(), hvd.local_rank()) == (len(local), local.index(hvd.rank()))
    assert (hvd.cross_size(), hvd.cross_rank()) == (len(cross), cross.index(hvd.rank()))
