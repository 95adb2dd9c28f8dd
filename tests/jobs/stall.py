"""Job for test_reliability: the last rank skips tensor 'lonely' (after it was
cached once); the others must get the stall error, and the last rank's next
collective must say the engine stopped and why."""
import time

import tensorflow as tf

import tf_ring as hvd

hvd.init()
last = hvd.size() - 1
hvd.allreduce(tf.ones(2), name="lonely")  # cached: the stall must still be seen
start = time.time()
try:
    if hvd.rank() != last:
        hvd.allreduce(tf.ones(2), name="lonely")
    else:
        deadline = time.monotonic() + 60  # until the stall has stopped the engine here too
        while hvd.is_initialized() and time.monotonic() < deadline:
            time.sleep(0.05)
        hvd.allreduce(tf.ones(2), name="after_stall")
    print("rank %d: NO ERROR" % hvd.rank(), flush=True)
except tf.errors.OpError as e:
    print("rank %d: ERROR after %.1fs: %s" % (hvd.rank(), time.time() - start, e.message), flush=True)
