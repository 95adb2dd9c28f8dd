"""Job for test_reliability: rank 1 has a collective nobody else submits when
rank 0 shuts down; rank 1 gets a 'shut down' error. Then a thread's pending
collective is left behind at interpreter exit, which must not deadlock."""
import threading
import time

import tensorflow as tf

import tf_ring as hvd


def in_flight(target):
    """Runs `target` in a thread and returns it once the engine has taken
    its collective (this rank's requests taken into a cycle go up)."""
    taken = lambda: hvd.stats()["cache_hits"] + hvd.stats()["cache_misses"]  # noqa: E731
    before = taken()
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while taken() == before and time.monotonic() < deadline:
        time.sleep(0.005)
    return thread


hvd.init()
if hvd.rank() == 0:
    # The others run 'pending' only once their 'only_on_rank_1' is in flight.
    hvd.allreduce(tf.ones(1), name="pending")
    hvd.shutdown()
    print("rank 0: shut down", flush=True)
else:
    def lonely():
        try:
            hvd.allreduce(tf.ones(3), name="only_on_rank_1")
        except tf.errors.AbortedError as e:
            print("rank %d: ABORTED: %s" % (hvd.rank(), e.message), flush=True)

    thread = in_flight(lonely)
    hvd.allreduce(tf.ones(1), name="pending")
    thread.join(timeout=60)
hvd.init()  # a fresh engine on every rank
in_flight(lambda: hvd.allreduce(tf.ones(3), name="left_behind_%d" % hvd.rank()))
print("rank %d: exiting with work in flight" % hvd.rank(), flush=True)
