"""Each collective's Pending dropped on rank 0 before the other ranks submit:
the binding must keep rank 0's arrays and outputs alive until the engine is
done. Rank 0 then fills fresh arrays (which would reuse freed memory) and
checks nothing wrote into them; the other ranks check their results against
NumPy. Run by tests/builds/test_engine_only.py on 2 and 3 ranks."""
import gc
import time

import numpy as np

import tf_ring_engine as e

e.init()
n, r = e.size(), e.rank()
ROWS, COLS = 4 * n, 64


def value(rank):
    """What `rank` submits: distinct on every rank and element."""
    return (np.arange(ROWS * COLS, dtype=np.float32).reshape(ROWS, COLS) + 1000.0 * (rank + 1))


ALL = [value(k) for k in range(n)]


def submit(kind, name):
    """Submits collective `kind` of this rank's value; returns (pendings, expected results)."""
    x = value(r)
    if kind == "allreduce":
        return [e.allreduce(x, op=e.Sum, name=name)], [sum(ALL)]
    if kind == "allreduce_in_place":
        return [e.allreduce(x, op=e.Sum, name=name, output=x)], [sum(ALL)]
    if kind == "grouped_allreduce":
        return (e.grouped_allreduce([x, 2 * x], op=e.Sum, name=name), [sum(ALL), 2 * sum(ALL)])
    if kind == "broadcast":
        return [e.broadcast(x, root_rank=0, name=name)], [ALL[0]]
    if kind == "allgather":
        return [e.allgather(x, name=name)], [np.concatenate(ALL)]
    if kind == "reducescatter":
        rows = ROWS // n
        return [e.reducescatter(x, op=e.Sum, name=name)], [sum(ALL)[r * rows:(r + 1) * rows]]
    if kind == "alltoall":
        rows = ROWS // n
        return [e.alltoall(x, name=name)], [np.concatenate([a[r * rows:(r + 1) * rows] for a in ALL])]
    raise ValueError(kind)


def sync(name):
    e.allreduce(np.zeros(1, np.float32), op=e.Sum, name=name).wait(120)


KINDS = ["allreduce", "allreduce_in_place", "grouped_allreduce", "broadcast", "allgather", "reducescatter",
         "alltoall"]
for kind in KINDS:
    name = "dropped." + kind
    if r == 0:
        pending, _ = submit(kind, name)
        del pending
        gc.collect()
        fresh = [np.zeros((ROWS * n, COLS), np.float32) for _ in range(64)]
        fresh += [np.zeros((ROWS, COLS), np.float32) for _ in range(64)]
        sync("go." + kind)        # only now do the others submit
        sync("after." + kind)     # they submit this once theirs is done
        changed = sum(int(np.any(f != 0)) for f in fresh)
        assert changed == 0, "%s: %d fresh arrays were written after the Pending was dropped" % (kind, changed)
    else:
        sync("go." + kind)
        time.sleep(0.2)
        pending, want = submit(kind, name)
        for p, w in zip(pending, want):
            got = p.wait(120)
            got = got[0] if kind == "alltoall" else got
            np.testing.assert_array_equal(got, w, err_msg="%s on rank %d" % (kind, r))
        sync("after." + kind)
    print("rank %d: %s dropped and right" % (r, kind), flush=True)

e.shutdown()
print("rank %d: dropped pendings all right" % r, flush=True)
