"""init() with mpi4py: user MPI calls beside the engine, a sub-communicator,
and shutdown followed by a fresh init(); stats() after shutdown."""
import threading
import time

import numpy as np
import tensorflow as tf
from mpi4py import MPI

import tf_ring as hvd


def test_user_mpi4py_calls_beside_engine():
    # The engine uses its own duplicate communicator: interleaved user
    # traffic on COMM_WORLD must not get mixed up with tf_ring's.
    world = MPI.COMM_WORLD
    for step in range(5):
        user_sum = world.allreduce(world.Get_rank() + step)
        ring_sum = hvd.allreduce(tf.constant(float(hvd.rank() + step)), op=hvd.Sum, name="mix")
        assert user_sum == ring_sum.numpy() == sum(range(world.Get_size())) + step * world.Get_size()
    assert hvd.mpi_threads_supported()


def test_reinit_on_sub_communicator_then_world():
    world = MPI.COMM_WORLD
    hvd.shutdown()
    color = world.Get_rank() % 2
    sub = world.Split(color=color, key=world.Get_rank())
    hvd.init(comm=sub)
    members = [r for r in range(world.Get_size()) if r % 2 == color]
    assert hvd.size() == len(members) and hvd.rank() == members.index(world.Get_rank())
    gathered = hvd.allgather(tf.constant([world.Get_rank()]), name="sub_members")
    np.testing.assert_array_equal(gathered.numpy(), members)
    hvd.shutdown()
    sub.Free()
    hvd.init()
    assert hvd.size() == world.Get_size()
    total = hvd.allreduce(tf.constant(1.0), op=hvd.Sum, name="back_on_world")
    assert total.numpy() == world.Get_size()


def test_init_with_rank_list():
    hvd.shutdown()
    hvd.init(comm=list(range(MPI.COMM_WORLD.Get_size())))
    assert hvd.size() == MPI.COMM_WORLD.Get_size()
    hvd.shutdown()
    hvd.init()


def test_stats_count_a_collective_failed_by_shutdown():
    """stats()['tensors'] counts failed tensors, those that shutdown() fails too."""
    taken = lambda: hvd.stats()["cache_hits"] + hvd.stats()["cache_misses"]  # noqa: E731
    before, tensors, result = taken(), hvd.stats()["tensors"], {}

    def never_matched():  # a name no other rank submits
        try:
            hvd.allreduce(tf.ones(2), name="never_matched_%d" % hvd.rank())
        except tf.errors.AbortedError as e:
            result["error"] = e.message

    thread = threading.Thread(target=never_matched)
    thread.start()
    deadline = time.monotonic() + 60  # until the engine has taken it into a cycle
    while taken() == before and time.monotonic() < deadline:
        time.sleep(0.005)
    # Nobody shuts down before every rank's collective is in flight. A rank
    # may be stopped by another's shutdown before its own: counted either way.
    hvd.allreduce(tf.ones(1), name="all_pending")
    hvd.shutdown()
    thread.join(timeout=60)
    assert "tf_ring was shut down" in result["error"], result
    assert hvd.stats()["tensors"] == tensors + 2, (tensors, hvd.stats())  # all_pending, never_matched
    hvd.init()
