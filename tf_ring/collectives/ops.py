"""The collectives as TensorFlow ops, usable in eager, tf.function and v1 graphs."""
import tensorflow as tf

from tf_ring.collectives._allgather_op import allgather
from tf_ring.collectives._eager_names import eager_name
from tf_ring.runtime._library import OPS
from tf_ring.collectives._op_common import (_EAGER_TENSOR, MOVE_DTYPES, REDUCE_DTYPES, Adasum, Average, Max, Min,
                                            Product, Sum, as_tensor, auto_name, check_adasum,
                                            check_dtype, resolve_op)
from tf_ring.runtime.process_set import global_process_set, process_set_id_of
from tf_ring.collectives.sparse import allreduce_indexed_slices

# op= values the fast path takes, and what each means (None: the default, Average).
# Adasum has checks of its own.
_PLAIN_OPS = {None: Average, Sum: Sum, Average: Average, Min: Min, Max: Max, Product: Product}
_REDUCE_ENUMS = frozenset(d.as_datatype_enum for d in REDUCE_DTYPES)

__all__ = ["Sum", "Average", "Min", "Max", "Product", "Adasum", "allreduce", "allgather",
           "broadcast"]


def allreduce(tensor, average=None, device_dense="", device_sparse="", compression=None, op=None,
              prescale_factor=1.0, postscale_factor=1.0, name=None, ignore_name_scope=False,
              process_set=global_process_set):
    """Reduces `tensor` over all ranks with `op` (default Average).

    op=Adasum combines the ranks' tensors with adaptive summation (see
    cc/common/collectives/adasum/adasum.cc): float16/32/64, power-of-two rank counts.

    prescale_factor multiplies each rank's input before the reduction,
    postscale_factor the result after it. Horovod's deprecated arguments are
    accepted: `average=True/False` means op=Average/Sum (not with op=);
    device_dense, device_sparse (this build runs collectives on the CPU) and
    ignore_name_scope (tf_ring never prefixes names with the name scope) do
    nothing. tf.IndexedSlices are reduced by allgather (Sum or Average only).
    process_set: reduce among that set's ranks only (Average divides by its size).
    """
    if (type(tensor) is _EAGER_TENSOR and op in _PLAIN_OPS and average is None and name is None
            and compression is None and process_set is global_process_set
            and tensor._datatype_enum() in _REDUCE_ENUMS and tf.executing_eagerly()):
        # A lone eager call's common case, with the checks below already
        # answered: each Python step here is a measurable share of a small op.
        return OPS.tf_ring_allreduce(tensor, reduce_op=_PLAIN_OPS[op], prescale_factor=prescale_factor,
                                     postscale_factor=postscale_factor,
                                     tensor_name=eager_name("allreduce"), process_set_id=0, eager=True)
    op = resolve_op("allreduce", op, average)
    set_id = process_set_id_of(process_set, "allreduce")
    if isinstance(tensor, tf.IndexedSlices):
        return allreduce_indexed_slices(tensor, op=op, name=name, prescale_factor=prescale_factor,
                                        postscale_factor=postscale_factor, compression=compression,
                                        process_set=process_set)
    tensor = as_tensor(tensor, "allreduce", name)
    check_dtype("allreduce", tensor, REDUCE_DTYPES, name)
    if op == Adasum:
        check_adasum("allreduce", tensor, name)
    tensor_name = auto_name("allreduce", tensor, name)
    if compression is None:  # the common case, without the no-op compressor's calls
        return OPS.tf_ring_allreduce(
            tensor, reduce_op=op, prescale_factor=prescale_factor,
            postscale_factor=postscale_factor, tensor_name=tensor_name, process_set_id=set_id,
            eager=tf.executing_eagerly())
    compressed, ctx = compression.compress(tensor)
    reduced = OPS.tf_ring_allreduce(
        compressed, reduce_op=op, prescale_factor=prescale_factor,
        postscale_factor=postscale_factor, tensor_name=tensor_name, process_set_id=set_id,
            eager=tf.executing_eagerly())
    return compression.decompress(reduced, ctx)


def broadcast(tensor, root_rank, name=None, ignore_name_scope=False,
              process_set=global_process_set):
    """Returns root_rank's `tensor` on every rank (ignore_name_scope does nothing).

    process_set: broadcast among that set's ranks; root_rank is still a
    global rank, and must be one of the set's.
    """
    set_id = process_set_id_of(process_set, "broadcast")
    tensor = as_tensor(tensor, "broadcast", name)
    check_dtype("broadcast", tensor, MOVE_DTYPES, name)
    return OPS.tf_ring_broadcast(tensor, root_rank=int(root_rank),
                                 tensor_name=auto_name("broadcast", tensor, name),
                                 process_set_id=set_id, eager=tf.executing_eagerly())

