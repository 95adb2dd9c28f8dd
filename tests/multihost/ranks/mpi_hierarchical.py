"""Hierarchical collectives, run by tests/multihost/test_hierarchical.py on 2
simulated hosts x 2 ranks. Every result is checked against NumPy on all
ranks' recomputed inputs; hierarchical results are compared with the flat
path's (the engine restarted with TF_RING_HIERARCHICAL=0) bit for bit where
the reduction order cannot matter. Written for any host layout: the
expected values come from the topology the ranks report."""
import json
import os
import tempfile

import numpy as np
import pytest
import tensorflow as tf

import tf_ring as hvd
from helpers import all_inputs, check_on_root, rank_input
from parallel.ranks.mpi_collectives import expected_reduction, check_close

OPS = {hvd.Sum: "sum", hvd.Average: "average", hvd.Min: "min", hvd.Max: "max",
       hvd.Product: "product"}
REDUCE_DTYPES = [tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.int32, tf.int64]
CHUNK_FLOAT32 = (4 << 20) // 4  # float32 elements in one chunk (hierarchical default: 4 MiB)


def reinit(**env):
    """Restarts the engine with these TF_RING_* settings (read at init)."""
    hvd.shutdown()
    for key in ("TF_RING_HIERARCHICAL", "TF_RING_FUSION_THRESHOLD", "TF_RING_CYCLE_TIME",
                "TF_RING_SHM_CHUNK_BYTES"):
        os.environ.pop(key, None)
    os.environ.update({k: str(v) for k, v in env.items()})
    hvd.init()


@pytest.fixture(autouse=True)
def automatic_engine():
    yield
    if any(k in os.environ for k in ("TF_RING_HIERARCHICAL", "TF_RING_FUSION_THRESHOLD",
                                      "TF_RING_CYCLE_TIME", "TF_RING_SHM_CHUNK_BYTES")):
        reinit()


def crossed(fn):
    """Runs fn(); returns its result and how many collectives went hierarchical."""
    before = hvd.stats()["hierarchical_batches"]
    result = fn()
    return result, hvd.stats()["hierarchical_batches"] - before


def test_layout_is_several_hosts_and_the_engine_goes_hierarchical():
    assert hvd.size() == hvd.local_size() * hvd.cross_size()
    assert hvd.cross_size() >= 2 and hvd.local_size() >= 2, "run under 2+ hosts x 2+ ranks"
    # The placement the driver asked for: host by host, or dealt round-robin.
    placement = os.environ["TF_RING_TEST_PLACEMENT"]
    if placement == "by_slot":
        assert hvd.cross_rank() == hvd.rank() // hvd.local_size()
    else:
        assert placement == "round_robin" and hvd.cross_rank() == hvd.rank() % hvd.cross_size()
    _, n = crossed(lambda: hvd.allreduce(tf.ones([4]), name="layout_ar"))
    assert n == 1
    # Alltoall and reducescatter stay flat.
    _, n = crossed(lambda: hvd.alltoall(tf.ones([hvd.size(), 2]), name="layout_a2a"))
    assert n == 0
    reinit(TF_RING_HIERARCHICAL=0)
    _, n = crossed(lambda: hvd.allreduce(tf.ones([4]), name="layout_ar"))
    assert n == 0


@pytest.mark.parametrize("dtype", REDUCE_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("op", list(OPS), ids=lambda o: OPS[o])
def test_allreduce_every_op_and_dtype(dtype, op):
    low, high = (1, 3) if op == hvd.Product else (-8, 8)
    inputs = all_inputs((3, 5), dtype, seed=op, low=low, high=high)
    result, n = crossed(lambda: hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=op,
                                              name="h_ar_%s_%d" % (dtype.name, op)))
    assert n == 1 and result.dtype == dtype and result.shape == (3, 5)
    check_close(result, expected_reduction(inputs, op, dtype), dtype)


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64, tf.float16, tf.int32], ids=lambda d: d.name)
@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average], ids=["sum", "average"])
def test_prescale_postscale_and_average_divide_by_the_global_size(dtype, op):
    inputs = all_inputs((1001,), dtype, seed=17)
    result = hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=op, prescale_factor=0.5,
                           postscale_factor=3.0, name="h_scaled_%s_%d" % (dtype.name, op))
    expected = expected_reduction(inputs, op, dtype, 0.5, 3.0)
    if dtype == tf.float32:
        # Sums of 4 values up to 8 that cancel: absolute error, a few float32 ulps of 48.
        np.testing.assert_allclose(result.numpy(), expected, rtol=1e-6, atol=2e-5)
    else:
        check_close(result, expected, dtype)


def test_integer_average_is_exact_truncation():
    inputs = [np.array([7 * r + 1, -r, 2 ** 30 + r, -(2 ** 30) - 3 * r], np.int64)
              for r in range(hvd.size())]
    result = hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=hvd.Average, name="h_int_avg")
    total = np.sum(inputs, axis=0)
    np.testing.assert_array_equal(result.numpy(), np.trunc(total / hvd.size()).astype(np.int64))


@pytest.mark.parametrize("elements", [1, 3, CHUNK_FLOAT32 - 1, CHUNK_FLOAT32, CHUNK_FLOAT32 + 1,
                                      2 * CHUNK_FLOAT32 + 17])
def test_sizes_around_the_shared_memory_chunk(elements):
    ints = all_inputs((elements,), tf.int32, seed=21, low=-1000, high=1000)
    floats = all_inputs((elements,), tf.float32, seed=22)
    got_i = hvd.allreduce(tf.constant(ints[hvd.rank()]), op=hvd.Sum, name="h_chunk_i").numpy()
    got_f = hvd.allreduce(tf.constant(floats[hvd.rank()]), op=hvd.Average, name="h_chunk_f")
    np.testing.assert_array_equal(got_i, np.sum(ints, axis=0))
    check_close(got_f, expected_reduction(floats, hvd.Average, tf.float32), tf.float32)


def fused_workload(count=60):
    """A grouped allreduce of `count` float32 tensors, some larger than a chunk."""
    sizes = [1 + (i * 7919) % 5000 for i in range(count - 2)] + [CHUNK_FLOAT32 + 5, 2 * CHUNK_FLOAT32]
    inputs = [all_inputs((n,), tf.float32, seed=200 + i) for i, n in enumerate(sizes)]
    return sizes, inputs


@pytest.mark.parametrize("chunk_bytes", [None, 4096], ids=["default_chunk", "4k_chunk"])
def test_fused_batch_of_many_tensors(chunk_bytes):
    if chunk_bytes:
        reinit(TF_RING_SHM_CHUNK_BYTES=chunk_bytes)
    sizes, inputs = fused_workload()
    before = hvd.stats()
    outs = hvd.grouped_allreduce([tf.constant(x[hvd.rank()]) for x in inputs], op=hvd.Average,
                                 name="h_fused")
    after = hvd.stats()
    assert after["fused_batches"] > before["fused_batches"]
    assert after["hierarchical_batches"] > before["hierarchical_batches"]
    for x, out in zip(inputs, outs):
        check_close(out, expected_reduction(x, hvd.Average, tf.float32), tf.float32)


def bitwise_workload():
    """Results of collectives whose answers do not depend on the reduction
    order (integers; floats holding small integers; min/max), and of random
    float sums, whose answers may. Keyed by a label."""
    me = hvd.rank()
    out = {}
    for op in OPS:
        low, high = (1, 3) if op == hvd.Product else (-50, 50)
        for dtype in (tf.int32, tf.int64):
            x = rank_input(me, (CHUNK_FLOAT32 + 33,), dtype, seed=300 + op, low=low, high=high)
            out["%s_%s" % (dtype.name, OPS[op])] = hvd.allreduce(
                tf.constant(x), op=op, name="bw_%s_%d" % (dtype.name, op)).numpy()
        for dtype in (tf.float32, tf.float16):
            x = rank_input(me, (5000,), tf.int32, seed=400 + op, low=low, high=high)
            x = tf.cast(tf.constant(x), dtype)  # small integers: every order sums exactly
            out["%s_%s_integral" % (dtype.name, OPS[op])] = hvd.allreduce(
                x, op=op, name="bw_int_%s_%d" % (dtype.name, op)).numpy()
    x = rank_input(me, (CHUNK_FLOAT32 + 33,), tf.float32, seed=500)
    out["float32_random_sum"] = hvd.allreduce(tf.constant(x), op=hvd.Sum, name="bw_rand").numpy()
    gathered = hvd.allgather(tf.constant(rank_input(me, (me + 1, 3), tf.float32, seed=501)),
                             name="bw_gather").numpy()
    out["float32_allgather"] = gathered
    out["float32_broadcast"] = hvd.broadcast(tf.constant(rank_input(me, (77,), tf.float32, seed=502)),
                                             root_rank=hvd.size() - 1, name="bw_bcast").numpy()
    return out


def test_hierarchical_equals_flat_bit_for_bit_where_order_cannot_matter():
    hierarchical, n = crossed(bitwise_workload)
    assert n == len(hierarchical)
    reinit(TF_RING_HIERARCHICAL=0)
    flat, n = crossed(bitwise_workload)
    assert n == 0
    for key in hierarchical:
        if key == "float32_random_sum":
            # Sums of random floats: hierarchical adds within hosts first, so
            # the last bits may differ from MPI's flat order (see
            # docs/how-the-engine-works.md).
            np.testing.assert_allclose(hierarchical[key], flat[key], rtol=1e-5, err_msg=key)
        else:
            np.testing.assert_array_equal(hierarchical[key], flat[key], err_msg=key)


def test_hierarchical_results_do_not_depend_on_fusion_or_chunking():
    # Within hierarchical the order is fixed (local ranks in order, then the
    # hosts), so fusing and chunk size change no bit even of random float sums.
    sizes, inputs = fused_workload(count=20)
    mine = [tf.constant(x[hvd.rank()]) for x in inputs]

    def run():
        return [o.numpy() for o in hvd.grouped_allreduce(mine, op=hvd.Sum, name="h_order")]

    fused = run()
    reinit(TF_RING_FUSION_THRESHOLD=0)
    unfused = [hvd.allreduce(t, op=hvd.Sum, name="h_order_%d" % i).numpy() for i, t in enumerate(mine)]
    reinit(TF_RING_SHM_CHUNK_BYTES=8192)
    small_chunks = run()
    for a, b, c in zip(fused, unfused, small_chunks):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)


@pytest.mark.parametrize("dtype", [tf.float32, tf.float16, tf.int32, tf.uint8, tf.bool],
                         ids=lambda d: d.name)
def test_allgather_uneven_first_dimension(dtype):
    inputs = [rank_input(r, (r + 1, 2, 3), dtype, seed=11) for r in range(hvd.size())]
    result, n = crossed(lambda: hvd.allgather(tf.constant(inputs[hvd.rank()]), name="h_ag_" + dtype.name))
    assert n == 1
    np.testing.assert_array_equal(result.numpy(), np.concatenate(inputs))


def test_fused_allgathers_and_a_rank_with_no_rows():
    reinit(TF_RING_CYCLE_TIME=50)  # one cycle takes all three
    rows = [0 if r == 1 else 2 * r + 1 for r in range(hvd.size())]
    a = [rank_input(r, (rows[r], 4), tf.float32, seed=30) for r in range(hvd.size())]
    b = [rank_input(r, (r + 2,), tf.int64, seed=31) for r in range(hvd.size())]
    c = [rank_input(r, (r % 2 + 1, 2), tf.float32, seed=32) for r in range(hvd.size())]
    me = hvd.rank()

    @tf.function
    def step():
        return (hvd.allgather(tf.constant(a[me]), name="h_fag_a"),
                hvd.allgather(tf.constant(b[me]), name="h_fag_b"),
                hvd.allgather(tf.constant(c[me]), name="h_fag_c"))

    before = hvd.stats()
    got = step()
    assert hvd.stats()["hierarchical_batches"] > before["hierarchical_batches"]
    for out, inputs in zip(got, (a, b, c)):
        np.testing.assert_array_equal(out.numpy(), np.concatenate(inputs))


@pytest.mark.parametrize("dtype", [tf.float32, tf.int64, tf.float16, tf.bool], ids=lambda d: d.name)
def test_broadcast_from_every_rank_on_every_host(dtype):
    for root in range(hvd.size()):
        inputs = all_inputs((300, 3), dtype, seed=40 + root)
        result, n = crossed(lambda: hvd.broadcast(tf.constant(inputs[hvd.rank()]), root_rank=root,
                                                  name="h_bc_%s_%d" % (dtype.name, root)))
        assert n == 1
        np.testing.assert_array_equal(result.numpy(), inputs[root])


def test_fused_broadcast_of_variables_from_a_rank_on_the_second_host():
    root = hvd.size() - 1
    values = [all_inputs((n,), tf.float32, seed=50 + i) for i, n in enumerate((3, 1000, 70000))]
    variables = [tf.Variable(v[hvd.rank()]) for v in values]
    hvd.broadcast_variables(variables, root_rank=root)
    for var, v in zip(variables, values):
        np.testing.assert_array_equal(var.numpy(), v[root])


def test_join_with_uneven_steps_divides_by_the_contributors():
    me, size = hvd.rank(), hvd.size()
    steps_of = lambda r: r % 3 + 1  # noqa: E731 (ranks on both hosts stop early)
    for step in range(steps_of(me)):
        x = tf.fill([CHUNK_FLOAT32 + 9], float((me + 1) * (step + 1)))
        total = hvd.allreduce(x, op=hvd.Sum, name="h_join_sum").numpy()
        mean = hvd.allreduce(x, op=hvd.Average, name="h_join_avg").numpy()
        ints = hvd.allreduce(tf.fill([7], me + 1), op=hvd.Min, name="h_join_min").numpy()
        active = [q for q in range(size) if steps_of(q) > step]
        expected = sum((q + 1) * (step + 1) for q in active)
        np.testing.assert_array_equal(total, np.full(total.shape, float(expected)))
        np.testing.assert_allclose(mean, np.full(mean.shape, expected / len(active)), rtol=1e-6)
        np.testing.assert_array_equal(ints, np.full(7, min(active) + 1))
    assert hvd.join() in [q for q in range(size) if steps_of(q) == max(map(steps_of, range(size)))]


def test_timeline_marks_the_hierarchical_transport():
    folder = hvd.broadcast_object(tempfile.mkdtemp() if hvd.rank() == 0 else None, root_rank=0,
                                  name="h_tl_dir")
    path = os.path.join(folder, "hier.json")
    hvd.start_timeline(path)
    hvd.allreduce(tf.ones([100]), name="h_tl_ar")
    hvd.allgather(tf.ones([hvd.rank() + 1]), name="h_tl_ag")
    hvd.broadcast(tf.ones([5]), root_rank=1, name="h_tl_bc")
    hvd.alltoall(tf.ones([hvd.size()]), name="h_tl_a2a")
    hvd.stop_timeline()

    def check():
        with open(path) as f:
            events = json.load(f)
        rows = {e["tid"]: e["args"]["name"] for e in events
                if e.get("ph") == "M" and e["name"] == "thread_name"}
        transport = {}
        for e in events:
            if e.get("ph") == "X" and "transport" in e.get("args", {}):
                transport[rows[e["tid"]]] = e["args"]["transport"]
        assert transport == {"h_tl_ar": "hierarchical", "h_tl_ag": "hierarchical",
                             "h_tl_bc": "hierarchical", "h_tl_a2a": "mpi"}, transport

    check_on_root(check, "h_tl_check")
