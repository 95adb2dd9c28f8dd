"""A rank dies (exits without finalizing) while the others start a GPU
collective that needs it. The job must end, not hang: the launcher sees the
dead rank and stops the job, and the survivors' NCCL communicator is aborted
when NCCL reports the lost peer. Run by test_gpu.py."""
import os
import sys

import numpy as np

import gpu_env
import tf_ring_engine as e

if gpu_env.GPU:
    import torch
    torch.cuda.set_device(int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")) % torch.cuda.device_count())
e.init()
x = gpu_env.to_device(np.ones(1 << 20), "float32")
for i in range(3):
    y = e.allreduce(x, op=e.Sum, name="warmup.%d" % i).wait()
    assert float(gpu_env.to_numpy(y)[0]) == e.size()
print("rank %d: warm-up done" % e.rank(), flush=True)
if e.rank() == e.size() - 1:
    os._exit(7)  # dies: no shutdown, no MPI_Finalize
try:
    e.allreduce(x, op=e.Sum, name="needs.the.dead.rank").wait(timeout=120)
    print("rank %d: the collective returned without the dead rank" % e.rank(), flush=True)
    sys.exit(3)
except (e.EngineError, TimeoutError) as ex:
    print("rank %d: failed: %s" % (e.rank(), ex), flush=True)
    sys.exit(4)
