"""Run by tests/launcher/test_shm_fallback.py in a mount namespace whose /dev/shm is
too small for the default shared-memory chunk: an allreduce spanning many
chunks must still give the exact rank-order sum."""
import numpy as np
import tensorflow as tf

import tf_ring as hvd

hvd.init()
n = 3_000_001  # 12 MB of float32: many chunks at either size
mine = np.arange(n, dtype=np.float32) * (hvd.rank() + 1)
out = hvd.allreduce(tf.constant(mine), op=hvd.Sum, name="small_dev_shm").numpy()
want = np.arange(n, dtype=np.float32)
for r in range(1, hvd.size()):
    want = want + np.arange(n, dtype=np.float32) * (r + 1)
assert np.array_equal(out, want), "rank %d: wrong sum" % hvd.rank()
print("rank %d: exact" % hvd.rank(), flush=True)
hvd.shutdown()
