"""Job for test_reliability: rank 1 has a collective nobody else submits when
rank 0 shuts down; rank 1 gets a 'shut down' error. Then a thread's pending
collective is left behind at interpreter exit, which must not deadlock."""
import threading
import time

import tensorflow as tf

import tf_ring as hvd

hvd.init()
if hvd.rank() == 0:
    time.sleep(1)
    hvd.shutdown()
    print("rank 0: shut down", flush=True)
else:
    try:
        hvd.allreduce(tf.ones(3), name="only_on_rank_1")
    except tf.errors.AbortedError as e:
        print("rank %d: ABORTED: %s" % (hvd.rank(), e.message), flush=True)
hvd.init()  # a fresh engine on every rank
pending = threading.Thread(target=lambda: hvd.allreduce(tf.ones(3), name="left_behind_%d" % hvd.rank()),
                           daemon=True)
pending.start()
time.sleep(0.5)
print("rank %d: exiting with work in flight" % hvd.rank(), flush=True)
