"""join(): training with a different number of batches on each rank."""
import tensorflow as tf

from tf_ring._library import OPS
from tf_ring.process_set import global_process_set, process_set_id_of


def join(device="", process_set=global_process_set):
    """Declares that this rank has run out of data.

    Until every rank has joined, the other ranks keep training: this rank
    takes part in their collectives with no data of its own (zeros to Sum,
    no rows to allgather; Average divides by the ranks that did submit), and
    join() blocks. It returns the rank that joined last: an int when run
    eagerly, a scalar int32 tensor inside tf.function or a v1 graph. A
    broadcast whose root has joined, alltoall and reducescatter cannot run
    while a rank has joined and fail with an error naming the joined ranks.
    `device` is accepted for Horovod code (CPU build). join() works on the
    global process set only (NotImplementedError for another set).
    """
    del device
    if process_set_id_of(process_set, "join") != 0:
        raise NotImplementedError(
            "tf_ring.join(process_set=%r): join() works on the global process set only; "
            "within a set, give every member the same number of steps (for example by "
            "allreducing the step count over the set first)." % (process_set,))
    result = OPS.tf_ring_join()
    if tf.executing_eagerly():
        return int(result.numpy())
    return result
