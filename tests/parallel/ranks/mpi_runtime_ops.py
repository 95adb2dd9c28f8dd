"""rank_op and friends (graph ops read when they run), is_homogeneous,
barrier() and the build queries, checked against mpi4py's own view of the
job on every rank."""
import time

import numpy as np
import pytest
import tensorflow as tf
from mpi4py import MPI

import tf_ring as hvd

# Built while pytest collects this file, before the session fixture calls
# init(): the ops must read the topology when the session runs them.
_GRAPH = tf.compat.v1.Graph()
_INITIALIZED_WHEN_BUILT = hvd.is_initialized()
with _GRAPH.as_default():
    _EARLY_OPS = [hvd.rank_op(), hvd.size_op(), hvd.local_rank_op(), hvd.local_size_op(),
                  hvd.process_set_included_op()]


def mpi_topology():
    world = MPI.COMM_WORLD
    node = world.Split_type(MPI.COMM_TYPE_SHARED)
    values = [world.Get_rank(), world.Get_size(), node.Get_rank(), node.Get_size()]
    node.Free()
    return values


def test_ops_built_before_init_read_the_topology_when_run():
    assert not _INITIALIZED_WHEN_BUILT
    with tf.compat.v1.Session(graph=_GRAPH) as session:
        values = session.run(_EARLY_OPS)
    assert [int(v) for v in values] == mpi_topology() + [1]
    assert all(v.dtype == np.int32 for v in values)


def test_ops_eagerly_and_in_tf_function():
    eager = [hvd.rank_op(), hvd.size_op(), hvd.local_rank_op(), hvd.local_size_op()]
    assert [int(v) for v in eager] == mpi_topology()
    fn = tf.function(lambda: [hvd.rank_op(), hvd.size_op(), hvd.local_rank_op(),
                              hvd.local_size_op(), hvd.process_set_included_op(0)])
    assert [int(v) for v in fn()] == mpi_topology() + [1]


def test_unregistered_process_set_ids_are_rejected():
    with pytest.raises(tf.errors.InvalidArgumentError, match="process set 1 is not registered"):
        hvd.process_set_included_op(1)
    with pytest.raises(tf.errors.InvalidArgumentError, match="process set 3 is not registered"):
        hvd.size_op(process_set_id=3)


def test_is_homogeneous_matches_the_node_sizes():
    node = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)
    sizes = MPI.COMM_WORLD.allgather(node.Get_size())
    node.Free()
    assert hvd.is_homogeneous() is (min(sizes) == max(sizes))


def test_build_queries_describe_this_build():
    assert hvd.mpi_built() and hvd.mpi_enabled()
    assert not any(f() for f in (hvd.gloo_built, hvd.gloo_enabled, hvd.ccl_built, hvd.ddl_built,
                                 hvd.rocm_built))
    # CUDA and NCCL follow what setup.py recorded: "cpu" or "cuda".
    cuda = hvd.build_info()["build"] == "cuda"
    assert hvd.cuda_built() == cuda and hvd.nccl_built() == cuda


def barrier_leaves_after_the_last_arrival(run_barrier):
    """The last rank arrives 0.5 s late; nobody may leave before it arrived
    (clocks are one machine's in this test). How long the others waited is
    not checked: a busy machine may hold one of them back just as long."""
    last = hvd.size() - 1
    if hvd.rank() == last:
        time.sleep(0.5)
    arrived = time.time()
    run_barrier()
    left = time.time()
    times = hvd.allgather_object((arrived, left))
    assert min(t[1] for t in times) >= times[last][0]


def test_barrier_eager():
    barrier_leaves_after_the_last_arrival(hvd.barrier)


def test_barrier_in_tf_function():
    @tf.function
    def fn():
        hvd.barrier(name="fn_barrier")  # runs although nothing uses its result
    barrier_leaves_after_the_last_arrival(fn)


def test_barrier_in_v1_graph():
    graph = tf.compat.v1.Graph()
    with graph.as_default():
        op = hvd.barrier()
    with tf.compat.v1.Session(graph=graph) as session:
        barrier_leaves_after_the_last_arrival(lambda: session.run(op))
