"""Process sets on the hierarchical path, run by
tests/multihost/test_hierarchical.py on 2 simulated hosts x 2 ranks (placed
host by host, and dealt round-robin). A set chooses its transport from its
own members' layout, as the global set does: every rank -> hierarchical
(shared memory in each host, MPI across); members all on one host -> shared
memory; one member per host or uneven hosts -> flat MPI. Results are checked
against NumPy over the members' recomputed inputs, and the set of every rank
against the global set bit for bit (same layout, same reduction order)."""
import socket

import numpy as np
import pytest
import tensorflow as tf

import tf_ring as hvd
from helpers import rank_input

CHUNK_FLOAT32 = (4 << 20) // 4  # float32 elements in one hierarchical chunk
SET_RANKS = [[0, 1, 2, 3], [0, 2], [1, 2, 3]]


@pytest.fixture(scope="module")
def sets():
    assert hvd.size() == 4 and hvd.cross_size() == 2, "run under 2 hosts x 2 ranks"
    made = [hvd.ProcessSet(r) for r in SET_RANKS]
    hvd.shutdown()
    hvd.init(process_sets=made)
    yield made
    hvd.shutdown()
    hvd.init()


@pytest.fixture(autouse=True)
def in_step():
    yield
    hvd.barrier(name="after_test")  # ranks outside a test's set wait here


def expected_path(ranks, hostnames):
    """The path a set of `ranks` must take, from where the ranks say they run."""
    per_host = {}
    for r in ranks:
        per_host[hostnames[r]] = per_host.get(hostnames[r], 0) + 1
    if len(per_host) == 1:
        return "shm"
    counts = set(per_host.values())
    return "hierarchical" if len(counts) == 1 and max(counts) > 1 else "flat"


def test_each_set_takes_the_path_its_layout_allows(sets):
    hostnames = hvd.allgather_object(socket.gethostname())
    paths = [expected_path(ps.ranks, hostnames) for ps in sets]
    assert paths[0] == "hierarchical" and paths[2] == "flat"  # 4 ranks; 3 on 2 hosts
    for ps, path in zip(sets, paths):
        if not ps.included():
            continue
        before = hvd.stats(process_set=ps)["hierarchical_batches"]
        hvd.allreduce(tf.ones([8]), name="path_probe", process_set=ps)
        crossed = hvd.stats(process_set=ps)["hierarchical_batches"] - before
        assert crossed == (1 if path == "hierarchical" else 0), (ps.ranks, path)


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64, tf.int32])
@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average, hvd.Min, hvd.Max])
def test_allreduce_in_every_set_matches_numpy(sets, dtype, op):
    # Two chunks and a bit: the chunk loop and its last partial chunk run.
    shape = [2 * CHUNK_FLOAT32 + 1001] if dtype == tf.float32 else [5003]
    for ps in sets:
        if not ps.included():
            continue
        inputs = [rank_input(r, shape, dtype, seed=7) for r in ps.ranks]
        mine = inputs[ps.ranks.index(hvd.rank())]
        got = hvd.allreduce(tf.constant(mine), op=op, name="set%d_ar" % ps.process_set_id,
                            process_set=ps).numpy()
        stacked = np.stack(inputs)
        if op == hvd.Sum:
            want = stacked.sum(axis=0, dtype=stacked.dtype)
        elif op == hvd.Min:
            want = stacked.min(axis=0)
        elif op == hvd.Max:
            want = stacked.max(axis=0)
        elif tf.as_dtype(dtype).is_integer:
            want = np.trunc(stacked.sum(axis=0) / len(inputs)).astype(stacked.dtype)
        else:
            want = stacked.mean(axis=0)
        if tf.as_dtype(dtype).is_integer or op in (hvd.Min, hvd.Max):
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_set_of_every_rank_equals_the_global_set_bit_for_bit(sets):
    everyone = sets[0]
    data = tf.constant(rank_input(hvd.rank(), [3 * CHUNK_FLOAT32 + 17], tf.float32, seed=3))
    in_set = hvd.allreduce(data, op=hvd.Sum, name="bits_set", process_set=everyone).numpy()
    global_ = hvd.allreduce(data, op=hvd.Sum, name="bits_global").numpy()
    assert in_set.tobytes() == global_.tobytes()


def test_allgather_with_uneven_rows_in_set_rank_order(sets):
    for ps in sets:
        if not ps.included():
            continue
        # Set rank k contributes k + 1 rows (set rank 0 on a 3-member set: 1 row).
        rows = [ps.ranks.index(r) + 1 for r in ps.ranks]
        inputs = [rank_input(r, [n, 3], tf.float32, seed=11) for r, n in zip(ps.ranks, rows)]
        mine = inputs[ps.rank()]
        got = hvd.allgather(tf.constant(mine), name="set%d_ag" % ps.process_set_id,
                            process_set=ps).numpy()
        np.testing.assert_array_equal(got, np.concatenate(inputs))


def test_broadcast_from_every_member_of_the_hierarchical_set(sets):
    everyone = sets[0]
    for root in everyone.ranks:
        data = rank_input(hvd.rank(), [1000, 7], tf.float64, seed=root)
        got = hvd.broadcast(tf.constant(data), root_rank=root, name="set_bcast_%d" % root,
                            process_set=everyone).numpy()
        np.testing.assert_array_equal(got, rank_input(root, [1000, 7], tf.float64, seed=root))


def test_fused_batch_of_many_tensors_in_the_hierarchical_set(sets):
    everyone = sets[0]
    shapes = [[int(n)] for n in np.random.default_rng(5).integers(1, 200000, size=24)]

    @tf.function
    def step(tensors):
        return [hvd.allreduce(t, op=hvd.Sum, name="fused_%d" % i, process_set=everyone)
                for i, t in enumerate(tensors)]

    mine = [tf.constant(rank_input(hvd.rank(), s, tf.float32, seed=i)) for i, s in enumerate(shapes)]
    got = step(mine)
    for i, (s, g) in enumerate(zip(shapes, got)):
        want = sum(rank_input(r, s, tf.float32, seed=i).astype(np.float64) for r in range(4))
        np.testing.assert_allclose(g.numpy(), want, rtol=1e-5, atol=1e-4)
