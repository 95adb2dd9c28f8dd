"""shutdown() while large GPU collectives are still queued or running: each
either completes with the right result or fails with a 'shut down' error;
nothing hangs and the process exits cleanly. Run by test_gpu.py."""
import os

import numpy as np

import gpu_env
import tf_ring_engine as e

if gpu_env.GPU:
    import torch
    torch.cuda.set_device(int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")) % torch.cuda.device_count())
e.init()
n, r = e.size(), e.rank()
count = 8
xs = [gpu_env.to_device(np.full(1 << 22, float(r + i)), "float32") for i in range(count)]  # 16 MB each
completed = failed = 0
pending = []
for i, x in enumerate(xs):
    try:
        pending.append((i, e.allreduce(x, op=e.Sum, name="inflight.%d" % i)))
    except e.EngineError as ex:  # a faster rank's shutdown already stopped the engine
        assert "shut down" in str(ex), str(ex)
        failed += 1
e.shutdown()
for i, p in pending:
    try:
        y = gpu_env.to_numpy(p.wait(timeout=60))
    except e.EngineError as ex:
        assert "shut down" in str(ex), str(ex)
        failed += 1
        continue
    want = float(sum(k + i for k in range(n)))
    assert y[0] == want and y[-1] == want, (i, y[0], want)
    completed += 1
print("rank %d: shutdown with work in flight: %d completed, %d failed with a shut-down error"
      % (r, completed, failed), flush=True)
assert completed + failed == count
