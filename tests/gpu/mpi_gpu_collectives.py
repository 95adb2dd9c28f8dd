"""Every engine collective on device buffers, on every rank (run on 2 and 3
ranks by test_gpu.py, sharing one GPU via `tfringrun --share-gpu`, with
`-p gpu_rank_plugin`, which starts the engine and stops the job on the
first failure).

Each rank builds every rank's input from (rank, tensor) alone, so the
expected result is computed independently with NumPy on each rank.
"""
import numpy as np
import pytest

import gpu_env

_reason = gpu_env.unavailable_reason()
if _reason:
    pytest.skip(_reason, allow_module_level=True)

import tf_ring_engine as e  # noqa: E402

from gpu_env import GPU, bits, to_device, to_numpy  # noqa: E402

REDUCIBLE = ["int32", "int64", "float16", "bfloat16", "float32", "float64"]
ALL_DTYPES = REDUCIBLE + ["uint8", "int8", "bool"]
OPS = {"Sum": e.Sum, "Average": e.Average, "Min": e.Min, "Max": e.Max, "Product": e.Product}


def rank_input(r, shape, seed, dtype="float32"):
    """Rank r's input: small integers, exact in every dtype and in any sum order."""
    rng = np.random.default_rng(1000 * seed + r)
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    low = 1 if dtype in ("uint8",) else -3
    return rng.integers(low, 4, size=shape).astype(np.float64)


def tolerance(dtype):
    return {"float16": 2e-3, "bfloat16": 1e-2}.get(dtype, 1e-6)


def expected_reduce(inputs, op, dtype):
    stack = np.stack(inputs)
    if op == "Sum":
        return stack.sum(0)
    if op == "Average":
        s = stack.sum(0)
        return np.trunc(s / len(inputs)) if dtype.startswith("int") else s / len(inputs)
    if op == "Min":
        return stack.min(0)
    if op == "Max":
        return stack.max(0)
    return stack.prod(0)


def test_int16_is_reduced_on_the_host_and_refused_on_a_gpu_but_moves_on_both():
    n, r = e.size(), e.rank()
    x = to_device(np.full(6, r + 1), "int16")
    p = e.allreduce(x, op=e.Sum, name="int16.sum")
    if GPU:
        # Refused by the coordinator on every rank: the communicator keeps working.
        with pytest.raises(e.EngineError, match="int16.sum.*NCCL has no 16-bit integer type"):
            p.wait()
    else:
        np.testing.assert_array_equal(to_numpy(p.wait()), np.full(6, n * (n + 1) // 2))
    gathered = e.allgather(x, name="int16.allgather").wait()
    np.testing.assert_array_equal(to_numpy(gathered), np.repeat(np.arange(1, n + 1), 6))
    y = e.allreduce(to_device(np.ones(3), "float32"), op=e.Sum, name="int16.after").wait()
    np.testing.assert_array_equal(to_numpy(y), np.full(3, n))


@pytest.mark.parametrize("dtype", REDUCIBLE)
@pytest.mark.parametrize("op", list(OPS))
def test_allreduce_every_op_and_dtype(dtype, op):
    n, r = e.size(), e.rank()
    shape = (7, 5)
    inputs = [rank_input(k, shape, 1) for k in range(n)]
    x = to_device(inputs[r], dtype)
    y = e.allreduce(x, op=OPS[op], name="ar.%s.%s" % (op, dtype)).wait()
    want = expected_reduce(inputs, op, dtype)
    np.testing.assert_allclose(to_numpy(y).astype(np.float64), want, rtol=tolerance(dtype), atol=tolerance(dtype))
    # The input is left alone.
    np.testing.assert_array_equal(to_numpy(x).astype(np.float64), inputs[r])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("op", ["Sum", "Average"])
def test_prescale_and_postscale(dtype, op):
    n, r = e.size(), e.rank()
    inputs = [rank_input(k, (33,), 2) for k in range(n)]
    y = e.allreduce(to_device(inputs[r], dtype), op=OPS[op], name="scaled.%s.%s" % (op, dtype),
                    prescale=0.5, postscale=3.0).wait()
    want = expected_reduce(inputs, op, dtype) * 1.5
    np.testing.assert_allclose(to_numpy(y).astype(np.float64), want, rtol=2 * tolerance(dtype),
                               atol=2 * tolerance(dtype))


def test_scaling_min_on_gpu_is_refused_with_the_tensor_named():
    x = to_device(np.ones(4), "float32")
    p = e.allreduce(x, op=e.Min, name="scaled_min", prescale=2.0)
    if GPU:
        with pytest.raises(e.EngineError, match="scaled_min.*not supported for GPU tensors"):
            p.wait()
        # Refused by the coordinator on every rank: the NCCL communicator keeps working.
        y = e.allreduce(x, op=e.Min, name="after_scaled_min").wait()
        np.testing.assert_array_equal(to_numpy(y), np.ones(4))
    else:  # the CPU path scales any op
        np.testing.assert_array_equal(to_numpy(p.wait()), np.full(4, 2.0))


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_allgather_with_different_first_dimensions(dtype):
    n, r = e.size(), e.rank()
    inputs = [rank_input(k, (k + 1, 3), 3, dtype) for k in range(n)]
    y = e.allgather(to_device(inputs[r], dtype), name="ag." + dtype).wait()
    want = np.concatenate(inputs)
    assert tuple(y.shape) == want.shape
    np.testing.assert_array_equal(to_numpy(y).astype(want.dtype), want)


def test_allgather_with_equal_first_dimensions_and_a_rank_sending_nothing():
    n, r = e.size(), e.rank()
    even = [rank_input(k, (2, 4), 4) for k in range(n)]
    y = e.allgather(to_device(even[r], "float32"), name="ag.even").wait()
    np.testing.assert_array_equal(to_numpy(y), np.concatenate(even))
    some_empty = [rank_input(k, (0 if k == 0 else 2, 4), 5) for k in range(n)]
    y = e.allgather(to_device(some_empty[r], "float32"), name="ag.empty0").wait()
    np.testing.assert_array_equal(to_numpy(y), np.concatenate(some_empty))


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_broadcast_every_dtype(dtype):
    n, r = e.size(), e.rank()
    root = n - 1
    inputs = [rank_input(k, (6, 2), 6, dtype) for k in range(n)]
    y = e.broadcast(to_device(inputs[r], dtype), root, name="bc." + dtype).wait()
    np.testing.assert_array_equal(to_numpy(y).astype(inputs[root].dtype), inputs[root])


@pytest.mark.parametrize("rows", [5, 6])
@pytest.mark.parametrize("op", ["Sum", "Average", "Max"])
def test_reducescatter_even_and_uneven_rows(rows, op):
    n, r = e.size(), e.rank()
    inputs = [rank_input(k, (rows, 3), 7) for k in range(n)]
    y = e.reducescatter(to_device(inputs[r], "float32"), op=OPS[op], name="rs.%s.%d" % (op, rows)).wait()
    full = expected_reduce(inputs, op, "float32")
    counts = [rows // n + (k < rows % n) for k in range(n)]
    start = sum(counts[:r])
    # NCCL averages by pre-multiplying each input by 1/size, so a zero sum can
    # come back as a rounding residue: hence the absolute tolerance.
    np.testing.assert_allclose(to_numpy(y), full[start:start + counts[r]], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "int64", "bfloat16", "bool"])
def test_alltoall_with_uneven_splits(dtype):
    n, r = e.size(), e.rank()
    # Rank i sends (i + j) % 3 rows to rank j.
    splits = [[(i + j) % 3 for j in range(n)] for i in range(n)]
    inputs = [rank_input(i, (sum(splits[i]), 2), 8, dtype) for i in range(n)]
    out, received = e.alltoall(to_device(inputs[r], dtype), splits=splits[r], name="a2a." + dtype).wait()
    parts = []
    for i in range(n):
        start = sum(splits[i][:r])
        parts.append(inputs[i][start:start + splits[i][r]])
    want = np.concatenate(parts)
    np.testing.assert_array_equal(to_numpy(out).astype(want.dtype), want)
    np.testing.assert_array_equal(received, [splits[i][r] for i in range(n)])


def test_fused_equals_unfused_bit_for_bit():
    n, r = e.size(), e.rank()
    shapes = [(3,), (64, 7), (1,), (1000,), (5, 5, 5)]
    rng = np.random.default_rng(r)
    # Two ranks: random floats and Average (a/2 + b/2 is the same in any
    # order). More ranks: integer-valued floats and Sum, exact in any order,
    # since NCCL's ring may sum an element's contributions in an order that
    # depends on its offset (and its Average pre-multiplies by 1/size, which
    # rounds).
    if n == 2:
        data = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        op = e.Average
    else:
        data = [rng.integers(-50, 50, size=s).astype(np.float32) for s in shapes]
        op = e.Sum
    xs = [to_device(d, "float32") for d in data]
    singles = [e.allreduce(x, op=op, name="single.%d" % i).wait() for i, x in enumerate(xs)]
    before = e.stats()["fused_batches"]
    fused = [p.wait() for p in e.grouped_allreduce(xs, op=op, name="fused")]
    assert e.stats()["fused_batches"] > before, "the grouped allreduce was not fused"
    for a, b in zip(singles, fused):
        assert bits(a) == bits(b)


def test_grouped_allreduce_writes_into_the_outputs_given():
    n, r = e.size(), e.rank()
    data = [rank_input(r, s, 40 + i) for i, s in enumerate([(5,), (3, 4), (1,)])]
    xs = [to_device(d, "float32") for d in data]
    outs = [to_device(np.zeros_like(d), "float32") for d in data]
    results = [p.wait() for p in e.grouped_allreduce(xs, op=e.Sum, name="grouped.into", outputs=outs)]
    for i, (res, out) in enumerate(zip(results, outs)):
        assert res is out
        want = np.sum([rank_input(k, data[i].shape, 40 + i) for k in range(n)], axis=0)
        np.testing.assert_array_equal(to_numpy(out), want)
    in_place = [p.wait() for p in e.grouped_allreduce(xs, op=e.Sum, name="grouped.in_place", outputs=xs)]
    for i, x in enumerate(in_place):
        assert x is xs[i]
        want = np.sum([rank_input(k, data[i].shape, 40 + i) for k in range(n)], axis=0)
        np.testing.assert_array_equal(to_numpy(x), want)
    with pytest.raises(ValueError, match="2 outputs for 3 tensors"):
        e.grouped_allreduce(xs, name="grouped.short", outputs=outs[:2])


@pytest.mark.parametrize("stream", ["default", "side"])
def test_work_queued_before_the_submit_is_waited_for(stream):
    """The tensor is filled by a kernel that runs ~30 ms after the submit
    returns, on PyTorch's default stream (the binding's fast path) or on a
    side stream (DLPack's stream handshake): the engine must reduce the
    filled values, never the zeros before them."""
    if not GPU:
        pytest.skip("CUDA streams order GPU work only (this run uses host arrays)")
    import torch
    n, r = e.size(), e.rank()
    x = torch.zeros(1 << 18, dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    side = torch.cuda.Stream() if stream == "side" else torch.cuda.current_stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # noqa: SLF001 - a kernel that spins ~30 ms
        x.fill_(r + 1.0)
        p = e.allreduce(x, op=e.Sum, name="streams.%s" % stream, output=x)
    y = p.wait()
    np.testing.assert_array_equal(to_numpy(y), np.full(1 << 18, n * (n + 1) / 2, dtype=np.float32))


def test_a_process_set_runs_collectives_among_its_members_alone():
    """A set of ranks 0 and n-1 (every rank on 2, rank 1 left out on 3): its
    collectives see only the members' data, on a GPU over the set's own NCCL
    communicator, while the global set keeps working beside it."""
    n, r = e.size(), e.rank()
    members = [0, n - 1]
    ps = e.add_process_set(members)
    try:
        assert e.process_set_ranks(ps) == members
        if r in members:
            shape = (6, 3)
            x = to_device(rank_input(r, shape, 60), "float32")
            total = e.allreduce(x, op=e.Sum, name="set.allreduce", process_set=ps).wait()
            np.testing.assert_array_equal(to_numpy(total), sum(rank_input(k, shape, 60) for k in members))
            gathered = e.allgather(x, name="set.allgather", process_set=ps).wait()
            np.testing.assert_array_equal(to_numpy(gathered),
                                          np.concatenate([rank_input(k, shape, 60) for k in members]))
            root = members[-1]
            got = e.broadcast(x, root_rank=root, name="set.broadcast", process_set=ps).wait()
            np.testing.assert_array_equal(to_numpy(got), rank_input(root, shape, 60))
            ys = [to_device(rank_input(r, (5,), 61 + i), "float32") for i in range(3)]
            grouped = [p.wait() for p in e.grouped_allreduce(ys, op=e.Sum, name="set.grouped", process_set=ps)]
            for i, y in enumerate(grouped):
                np.testing.assert_array_equal(to_numpy(y), sum(rank_input(k, (5,), 61 + i) for k in members))
        everyone = e.allreduce(to_device(np.full(4, r + 1.0), "float32"), op=e.Sum, name="set.global").wait()
        np.testing.assert_array_equal(to_numpy(everyone), np.full(4, n * (n + 1) / 2))
    finally:
        e.remove_process_set(ps)


def test_steady_state_hits_the_response_cache():
    n, r = e.size(), e.rank()
    xs = [to_device(np.full((16,), float(r + i)), "float32") for i in range(4)]
    for _ in range(2):  # first pass fills the cache
        for p in [e.allreduce(x, op=e.Sum, name="cached.%d" % i) for i, x in enumerate(xs)]:
            p.wait()
    e.reset_stats()
    steps = 10
    for _ in range(steps):
        ys = [p.wait() for p in [e.allreduce(x, op=e.Sum, name="cached.%d" % i) for i, x in enumerate(xs)]]
    s = e.stats()
    assert s["cache_hits"] == steps * len(xs) and s["cache_misses"] == 0, s
    for i, y in enumerate(ys):
        np.testing.assert_array_equal(to_numpy(y), np.full((16,), float(sum(k + i for k in range(n)))))


def test_shape_mismatch_fails_on_every_rank_naming_tensor_and_ranks():
    r = e.rank()
    x = to_device(np.ones((3 + (r == 1),)), "float32")
    with pytest.raises(e.EngineError, match=r"'mismatch\.shape' does not match across ranks: the shape differs"):
        e.allreduce(x, name="mismatch.shape").wait()


def test_dtype_mismatch_fails_on_every_rank():
    r = e.rank()
    x = to_device(np.ones(4), "float32" if r == 0 else "float64")
    with pytest.raises(e.EngineError, match=r"'mismatch\.dtype'.*the dtype differs: float32 on rank 0"):
        e.allreduce(x, name="mismatch.dtype").wait()


def test_device_mismatch_fails_on_every_rank():
    if not GPU:
        pytest.skip("a GPU/CPU device mismatch needs a GPU (this run uses host arrays only)")
    r = e.rank()
    x = np.ones(4, np.float32) if r == 0 else to_device(np.ones(4), "float32")
    gpu_ranks = "rank 1" if e.size() == 2 else "ranks " + ", ".join(str(k) for k in range(1, e.size()))
    with pytest.raises(e.EngineError, match=r"'mismatch\.device'.*the device differs: CPU on rank 0; GPU on %s\."
                       % gpu_ranks):
        e.allreduce(x, name="mismatch.device").wait()
    # The engine still works afterwards.
    y = e.allreduce(to_device(np.ones(4), "float32"), op=e.Sum, name="after.mismatch").wait()
    np.testing.assert_array_equal(to_numpy(y), np.full(4, float(e.size())))


def test_join_lets_the_other_ranks_finish_their_gpu_collectives():
    n, r = e.size(), e.rank()
    # Rank 0 has one step less: it joins while the others still reduce.
    steps = 3 if r == 0 else 4
    results = []
    for step in range(steps):
        x = to_device(np.full((8,), float(r + 1 + step)), "float32")
        results.append(e.allreduce(x, op=e.Average, name="join.step.%d" % step).wait())
    last = e.join()
    assert last in range(1, n)
    for step in range(3):
        np.testing.assert_allclose(to_numpy(results[step]), np.full((8,), sum(k + 1 + step for k in range(n)) / n))
    if r != 0:
        # Step 3 ran without rank 0: Average divides by the ranks that contributed.
        np.testing.assert_allclose(to_numpy(results[3]), np.full((8,), sum(k + 4 for k in range(1, n)) / (n - 1)),
                                   rtol=1e-6)


def test_waiting_releases_the_gil():
    """Rank 0 waits on an allreduce the last rank joins only after a while;
    a Python thread keeps counting meanwhile, which it could not if wait()
    held the GIL."""
    import threading
    import time
    n, r = e.size(), e.rank()
    x = to_device(np.ones(4), "float32")
    ticks, stop = [0], threading.Event()

    def count():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.001)

    e.allreduce(x, op=e.Sum, name="gil.together").wait()  # every rank starts together
    if r == n - 1:
        time.sleep(1.0)
    counter = threading.Thread(target=count)
    counter.start()
    try:
        result = e.allreduce(x, op=e.Sum, name="gil.released").wait()
    finally:
        stop.set()
        counter.join()
    np.testing.assert_array_equal(to_numpy(result), np.full(4, n))
    if r == 0:
        assert ticks[0] > 100, ticks[0]


def test_cupy_arrays_travel_through_dlpack_too():
    if not GPU:
        pytest.skip("CuPy arrays are CUDA arrays (this run uses host arrays only)")
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed: its DLPack path cannot be checked here")
    n, r = e.size(), e.rank()
    inputs = [rank_input(k, (3, 5), 11) for k in range(n)]
    x = cupy.asarray(inputs[r].astype(np.float32))
    y = e.allreduce(x, op=e.Sum, name="cupy.allreduce").wait()
    assert type(y).__module__.startswith("cupy")
    np.testing.assert_array_equal(cupy.asnumpy(y), np.sum(inputs, axis=0).astype(np.float32))
    # An engine-allocated output comes back as a CuPy array too.
    g = e.allgather(x, name="cupy.allgather").wait()
    assert type(g).__module__.startswith("cupy")
    np.testing.assert_array_equal(cupy.asnumpy(g), np.concatenate(inputs).astype(np.float32))
