"""Where a collective's output memory comes from (cc/tensorflow/warm_outputs.h):
the input's own buffer when nobody else holds the input (reduced in place),
never when the input is still used afterwards; else, for a large host
output, a warm block that the next output of its size reuses.

Every result is compared with NumPy's sum of every rank's known input, on
each path the engine may take: the small shared-memory path (64 KB or
less), the staged and single-copy ones, a fused batch, and MPI itself
(TF_RING_SHM=0)."""
import os

import numpy as np
import pytest
import tensorflow as tf

import tf_ring as hvd
from helpers import all_inputs, rank_input

# 4 KB (one barrier), 1 MiB (one area), 9 MiB (chunked, more than two areas).
SIZES = [1024, 256 << 10, (9 << 20) // 4 + 3]
WARM_MIN_BYTES = 256 << 10  # warm_outputs.h's kMinWarmOutputBytes


def _counts():
    s = hvd.stats()
    return s["in_place_tensors"], s["warm_outputs"]


def _address(t):
    """The host address of an eager tensor's data (NumPy views it in place)."""
    return t._numpy().__array_interface__["data"][0]


def _expected_sum(n, seed, scale=1.0):
    return scale * np.sum([a.astype(np.float64) for a in all_inputs((n,), tf.float32, seed=seed)], axis=0)


def _check_in_place_allreduce(tag):
    for i, n in enumerate(SIZES):
        x = tf.constant(rank_input(hvd.rank(), (n,), tf.float32, seed=i))

        @tf.function
        def reduce_fresh(x):
            # x * 2 is a fresh tensor only the allreduce reads: forwarded.
            return hvd.allreduce(x * 2.0, op=hvd.Average, prescale_factor=0.5, postscale_factor=3.0,
                                 name="inplace.%s.%d" % (tag, n))

        hvd.reset_stats()
        got = reduce_fresh(x).numpy()
        in_place, _ = _counts()
        assert in_place == 1, (n, hvd.stats())
        # 2x, halved before, averaged, tripled after.
        np.testing.assert_allclose(got, _expected_sum(n, i, 3.0 / hvd.size()), rtol=1e-5, atol=1e-5)


def _check_in_place_grouped(tag):
    # A fused batch (the scratch or the spans) of fresh tensors, each its own output.
    xs = [tf.constant(rank_input(hvd.rank(), (n,), tf.float32, seed=10 + i)) for i, n in enumerate(SIZES)]

    @tf.function
    def reduce_fresh(xs):
        return hvd.grouped_allreduce([x * 2.0 for x in xs], op=hvd.Sum, name="inplace.group.%s" % tag)

    hvd.reset_stats()
    got = reduce_fresh(xs)
    assert _counts()[0] == len(SIZES), hvd.stats()
    for i, (n, g) in enumerate(zip(SIZES, got)):
        np.testing.assert_allclose(g.numpy(), _expected_sum(n, 10 + i, 2.0), rtol=1e-5, atol=1e-4)


def _check_input_used_afterwards_is_kept(tag):
    for i, n in enumerate(SIZES):
        x = tf.constant(rank_input(hvd.rank(), (n,), tf.float32, seed=20 + i))

        @tf.function
        def reduce_and_keep(x):
            y = x * 2.0
            reduced = hvd.allreduce(y, op=hvd.Sum, name="kept.%s.%d" % (tag, n))
            with tf.control_dependencies([reduced]):
                later = y + 0.0  # reads y after the allreduce finished
            return reduced, y, later

        hvd.reset_stats()
        reduced, y, later = reduce_and_keep(x)
        assert _counts()[0] == 0, (n, hvd.stats())
        mine = 2.0 * x.numpy()
        np.testing.assert_array_equal(y.numpy(), mine)
        np.testing.assert_array_equal(later.numpy(), mine)
        np.testing.assert_allclose(reduced.numpy(), _expected_sum(n, 20 + i, 2.0), rtol=1e-5, atol=1e-4)


def _check_eager_input_is_kept():
    for i, n in enumerate(SIZES):
        mine = rank_input(hvd.rank(), (n,), tf.float32, seed=30 + i)
        x = tf.constant(mine)
        hvd.reset_stats()
        got = hvd.allreduce(x, op=hvd.Sum, name="eager.kept.%d" % n)
        assert _counts()[0] == 0, hvd.stats()
        assert _address(got) != _address(x)
        np.testing.assert_array_equal(x.numpy(), mine)
        np.testing.assert_allclose(got.numpy(), _expected_sum(n, 30 + i), rtol=1e-5, atol=1e-4)


@pytest.fixture(params=["shm", "mpi"])
def transport(request):
    """The shared-memory paths, then MPI alone (TF_RING_SHM=0)."""
    if request.param == "mpi":
        hvd.shutdown()
        os.environ["TF_RING_SHM"] = "0"
        hvd.init()
    yield request.param
    if request.param == "mpi":
        hvd.shutdown()
        del os.environ["TF_RING_SHM"]
        hvd.init()


def test_a_tensor_nobody_else_holds_is_reduced_in_place(transport):
    _check_in_place_allreduce(transport)
    _check_in_place_grouped(transport)


def test_an_input_used_afterwards_is_never_overwritten(transport):
    _check_input_used_afterwards_is_kept(transport)
    _check_eager_input_is_kept()


def test_broadcast_of_a_fresh_tensor_in_place():
    root = hvd.size() - 1
    for i, n in enumerate(SIZES):
        x = tf.constant(rank_input(hvd.rank(), (n,), tf.float32, seed=40 + i))

        @tf.function
        def broadcast_fresh(x):
            return hvd.broadcast(x * 2.0, root_rank=root, name="inplace.bcast.%d" % n)

        hvd.reset_stats()
        got = broadcast_fresh(x).numpy()
        assert _counts()[0] == 1, hvd.stats()
        np.testing.assert_array_equal(got, 2.0 * rank_input(root, (n,), tf.float32, seed=40 + i))
        # Every rank's own input is still its own.
        np.testing.assert_array_equal(x.numpy(), rank_input(hvd.rank(), (n,), tf.float32, seed=40 + i))


def test_a_large_eager_output_reuses_its_warm_block():
    n = (4 << 20) // 4  # 4 MiB: past the warm threshold, on huge pages where granted
    x = tf.constant(rank_input(hvd.rank(), (n,), tf.float32, seed=50))
    expected = _expected_sum(n, 50)
    hvd.reset_stats()
    first = hvd.allreduce(x, op=hvd.Sum, name="warm.4mb")
    np.testing.assert_allclose(first.numpy(), expected, rtol=1e-5, atol=1e-4)
    where = _address(first)
    del first  # its block goes back to the warm set
    second = hvd.allreduce(x, op=hvd.Sum, name="warm.4mb")
    assert _address(second) == where
    np.testing.assert_allclose(second.numpy(), expected, rtol=1e-5, atol=1e-4)
    assert _counts() == (0, 2), hvd.stats()
    # While the second result lives, a third gets a block of its own.
    third = hvd.allreduce(x, op=hvd.Sum, name="warm.4mb")
    assert _address(third) != _address(second)
    np.testing.assert_allclose(third.numpy(), expected, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(second.numpy(), expected, rtol=1e-5, atol=1e-4)


def test_small_outputs_come_from_tensorflow():
    n = WARM_MIN_BYTES // 4 - 1
    x = tf.constant(rank_input(hvd.rank(), (n,), tf.float32, seed=60))
    hvd.reset_stats()
    got = hvd.allreduce(x, op=hvd.Sum, name="warm.small")
    np.testing.assert_allclose(got.numpy(), _expected_sum(n, 60), rtol=1e-5, atol=1e-4)
    assert _counts() == (0, 0), hvd.stats()
