"""Inputs that every rank can recompute for every other rank."""
import ctypes
import os

import numpy as np
import tensorflow as tf

import tf_ring as hvd


def rank_input(rank, shape, dtype, seed=0, low=-8, high=8):
    """Rank `rank`'s deterministic input, as a NumPy array of `dtype`."""
    rng = np.random.default_rng(1000 * seed + rank)
    np_dtype = tf.as_dtype(dtype).as_numpy_dtype
    if tf.as_dtype(dtype) == tf.bool:
        return rng.integers(0, 2, size=shape).astype(bool)
    if tf.as_dtype(dtype).is_unsigned:
        low = max(low, 0)  # no wrap-around: NumPy's expected values stay exact
    if tf.as_dtype(dtype).is_floating:
        return (rng.uniform(low, high, size=shape)).astype(np.float32).astype(np_dtype)
    return rng.integers(low, high, size=shape).astype(np_dtype)


def all_inputs(shape, dtype, seed=0, **kw):
    return [rank_input(r, shape, dtype, seed, **kw) for r in range(hvd.size())]


def check_on_root(check, name):
    """Runs `check()` (assertions on files only rank 0 has) on rank 0 and
    fails the test on every rank when it fails. Without this, the other ranks
    would run ahead into the next test's collectives, which the failed rank
    never joins, and the job would hang instead of reporting the failure."""
    import traceback
    error = None
    if hvd.rank() == 0:
        try:
            check()
        except Exception:  # noqa: BLE001 (any failure is reported on every rank)
            error = traceback.format_exc()
    error = hvd.broadcast_object(error, root_rank=0, name=name)
    if error:
        raise AssertionError("check on rank 0 failed:\n" + error)


def timeline_events(path):
    """(all events, {tensor name: its duration events}) of a timeline file,
    which must be complete JSON."""
    import json
    from collections import defaultdict
    with open(path) as f:
        events = json.load(f)
    rows = {e["tid"]: e["args"]["name"] for e in events
            if e.get("ph") == "M" and e["name"] == "thread_name"}
    by_tensor = defaultdict(list)
    for e in events:
        if e.get("ph") == "X":
            by_tensor[rows[e["tid"]]].append(e)
    return events, dict(by_tensor)


def rank_order(inputs, op):
    """Every rank's input combined in rank order with NumPy, as the engine's
    shared-memory paths combine them (Average sums; the caller scales)."""
    combine = {hvd.Sum: np.add, hvd.Average: np.add, hvd.Min: np.minimum,
               hvd.Max: np.maximum, hvd.Product: np.multiply}[op]
    out = inputs[0]
    for x in inputs[1:]:
        out = combine(out, x)
    return out


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def peers_readable():
    """Whether this rank may read its peers' memory, probed without tf_ring."""
    from mpi4py import MPI
    libc = ctypes.CDLL(None, use_errno=True)
    value = ctypes.c_uint64(0x5EED0000 + hvd.rank())
    mine = (os.getpid(), ctypes.addressof(value))
    everyone = MPI.COMM_WORLD.allgather(mine)
    ok = True
    for rank, (pid, address) in enumerate(everyone):
        if rank == hvd.rank():
            continue
        got = ctypes.c_uint64(0)
        local = _Iovec(ctypes.addressof(got), 8)
        remote = _Iovec(address, 8)
        n = libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        ok = ok and n == 8 and got.value == 0x5EED0000 + rank
    return all(MPI.COMM_WORLD.allgather(ok))


def every_rank_here():
    """A barrier outside the engine (MPI's own): before a rank restarts or
    shuts the engine down, every peer has left its previous collectives, so
    none sees the engine shut down under it instead of its own result or
    error."""
    from mpi4py import MPI  # imported late: tf_ring has initialised MPI by now
    MPI.COMM_WORLD.Barrier()


def within(seconds, fn, what="the call"):
    """fn()'s result (or its exception, raised here), run on a daemon thread
    so a hang fails the test after `seconds` instead of holding the job
    until the launcher's timeout (run_under_launcher then ends every rank)."""
    import threading
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 (re-raised on the caller's thread)
            out["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise AssertionError("rank %d: %s still waits after %.0f s (a hang)"
                             % (hvd.rank(), what, seconds))
    if "error" in out:
        raise out["error"]
    return out.get("value")
