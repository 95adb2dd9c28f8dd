"""join(): training with a different number of batches on each rank."""
import tensorflow as tf

from tf_ring.runtime._library import OPS
from tf_ring.runtime.process_set import global_process_set, process_set_id_of


def join(device="", process_set=global_process_set):
    """Declares that this rank has run out of data.

    Until every rank has joined, the other ranks keep training: this rank
    takes part in their collectives with no data of its own (zeros to Sum,
    no rows to allgather; Average divides by the ranks that did submit), and
    join() blocks. It returns the rank that joined last: an int when run
    eagerly, a scalar int32 tensor inside tf.function or a v1 graph. A
    broadcast whose root has joined, alltoall and reducescatter cannot run
    while a rank has joined and fail with an error naming the joined ranks.
    `device` is accepted for Horovod code (CPU build). With a `process_set`,
    only its members call join(), the stand-in covers that set's collectives
    and the returned rank is a global rank; other sets run on meanwhile.
    """
    del device
    result = OPS.tf_ring_join(process_set_id=process_set_id_of(process_set, "join"))
    if tf.executing_eagerly():
        return int(result.numpy())
    return result
