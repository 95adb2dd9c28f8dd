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

# Then the same within process set {0, 1}: rank 1 skips 'set_lonely'. The
# set's coordinator fails it, and the engine stops on every rank, rank 2
# (outside the set, on 3 ranks) included; nobody hangs.
hvd.shutdown()
members = hvd.ProcessSet([0, 1])
hvd.init(process_sets=[members])
start = time.time()
try:
    if hvd.rank() == 0:
        hvd.allreduce(tf.ones(2), process_set=members, name="set_lonely")
    else:
        deadline = time.monotonic() + 60
        while hvd.is_initialized() and time.monotonic() < deadline:
            time.sleep(0.05)
        if members.included():
            hvd.allreduce(tf.ones(2), process_set=members, name="set_after_stall")
        else:
            hvd.allreduce(tf.ones(2), name="global_after_stall")
    print("set rank %d: NO ERROR" % hvd.rank(), flush=True)
except tf.errors.OpError as e:
    print("set rank %d: FAILED after %.1fs: %s" % (hvd.rank(), time.time() - start, e.message),
          flush=True)
