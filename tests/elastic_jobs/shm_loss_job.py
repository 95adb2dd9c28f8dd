"""A rank dies in the middle of a shared-memory allreduce (--recovery
in-process, one host). Every step sums a 64 MB tensor holding rank + step
on each rank and checks the sum against the formula. The test makes the
last rank die inside step SHM_LOSS_KILL_AT's allreduce, after negotiation,
while its peers wait for it in the shared-memory segment:
TF_RING_TEST_DIE_AT_SHM_BARRIER="R:N" kills rank R at its segment's N-th
barrier, and each allreduce here passes 32 of them when staged in 4 MiB
chunks (16 chunks, two barriers each) or 3 when read directly (the test
pins the path). The survivors must leave their wait, recover in the
same processes and finish; prints START, STEP and END lines like
counter_job.py."""
import os
import time

import numpy as np
import tensorflow as tf

import tf_ring as hvd
from tf_ring import elastic

STEPS = 7
ELEMENTS = 64 * (1 << 20) // 4  # 64 MB


hvd.init()
# Only the first world's segment may kill: the shrunk world's new segment
# would count its barriers from 0 again.
os.environ.pop("TF_RING_TEST_DIE_AT_SHM_BARRIER", None)
state = elastic.ObjectState(step=0, total=0)


@elastic.run
def train(state):
    print("START rank=%d size=%d step=%d pid=%d t=%.3f" % (hvd.rank(), hvd.size(), state.step,
                                                           os.getpid(), time.time()), flush=True)
    while state.step < STEPS:
        size = hvd.size()
        value = tf.fill([ELEMENTS], float(hvd.rank() + state.step))
        got = hvd.allreduce(value, op=hvd.Sum, name="big").numpy()
        want = size * state.step + size * (size - 1) // 2  # sum over ranks of rank + step
        assert np.all(got == want), (state.step, size, got[:4], want)
        state.total += state.step
        state.step += 1
        print("STEP rank=%d size=%d step=%d t=%.3f" % (hvd.rank(), size, state.step, time.time()),
              flush=True)
        state.commit()


train(state)
print("END rank=%d size=%d step=%d total=%d" % (hvd.rank(), hvd.size(), state.step, state.total),
      flush=True)
