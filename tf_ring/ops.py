"""The collectives as TensorFlow ops, usable in eager, tf.function and v1 graphs."""
import re
import weakref

import tensorflow as tf

from tf_ring._library import OPS
from tf_ring.process_set import global_process_set, process_set_id_of

# Reduce ops; values match the engine's wire format.
Sum = 0
Average = 1
Min = 2
Max = 3
Product = 4
Adasum = 5
_REDUCE_OP_NAMES = {Sum: "Sum", Average: "Average", Min: "Min", Max: "Max", Product: "Product",
                    Adasum: "Adasum"}
ADASUM_DTYPES = (tf.float16, tf.float32, tf.float64)

REDUCE_DTYPES = (tf.uint8, tf.int8, tf.uint16, tf.int16, tf.int32, tf.int64, tf.float16,
                 tf.bfloat16, tf.float32, tf.float64)
MOVE_DTYPES = REDUCE_DTYPES + (tf.bool,)


def _normalize_name(name):
    """Node-name-safe version of a user or tensor name."""
    return re.sub(r"[^a-zA-Z0-9_./-]", "_", name)


def _auto_name(prefix, tensor, name):
    """The name that identifies this tensor to every rank.

    In graphs (tf.function, v1) the tensor's own name is stable and identical
    on every rank running the same code. Eagerly there is no such name, so
    unnamed eager collectives share one name per op and run one at a time.
    """
    if tf.executing_eagerly():
        return _normalize_name(name) if name else prefix + ".eager"
    base = _normalize_name(name) if name else "%s_%s" % (prefix, _normalize_name(tensor.name))
    return _unique_in_graph(base)


# Collective names handed out in each graph. As TF does with node names (and
# Horovod with the collective names it takes from them), a second collective
# of the same tensor, or with the same name=, in one graph gets name_1, ...:
# both can then be in flight in one step. Every rank builds the same graph in
# the same order, so every rank derives the same names.
_GRAPH_NAMES = weakref.WeakKeyDictionary()


def _unique_in_graph(base):
    used = _GRAPH_NAMES.setdefault(tf.compat.v1.get_default_graph(), set())
    candidate, suffix = base, 0
    while candidate in used:
        suffix += 1
        candidate = "%s_%d" % (base, suffix)
    used.add(candidate)
    return candidate


def _check_dtype(what, tensor, allowed, name):
    if tensor.dtype not in allowed:
        raise TypeError(
            "tf_ring.%s of tensor '%s': dtype %s is not supported; supported dtypes are %s. "
            "Cast the tensor (for example with tf.cast) before the collective."
            % (what, name or getattr(tensor, "name", "?"), tensor.dtype.name,
               ", ".join(d.name for d in allowed)))


def _as_tensor(tensor, what, name):
    try:
        return tf.convert_to_tensor(tensor)
    except (TypeError, ValueError) as e:
        raise TypeError("tf_ring.%s of '%s': cannot convert %r to a tensor: %s"
                        % (what, name, type(tensor).__name__, e)) from e


def _resolve_op(what, op, average):
    """Horovod's rule for the deprecated `average`: it maps to Average/Sum,
    with a DeprecationWarning, and may not be combined with `op`."""
    if average is not None:
        if op is not None:
            raise ValueError("tf_ring.%s: the op parameter supersedes average; pass only one of "
                             "them (op=tf_ring.Average or op=tf_ring.Sum)." % what)
        import warnings
        warnings.warn("tf_ring.%s: `average` is deprecated (as in Horovod); use op=tf_ring.Average "
                      "or op=tf_ring.Sum instead." % what, DeprecationWarning, stacklevel=3)
        op = Average if average else Sum
    if op is None:
        op = Average
    if op not in _REDUCE_OP_NAMES:
        raise ValueError("tf_ring.%s: unknown op %r; use one of tf_ring.%s"
                         % (what, op, ", tf_ring.".join(_REDUCE_OP_NAMES.values())))
    return op


def _check_adasum(what, tensor, name):
    """Adasum's rules, as in Horovod: float16/32/64, and on the CPU a
    power-of-two number of ranks (NotImplementedError otherwise). Before
    init() the size is unknown; the coordinator checks it again at run time."""
    _check_dtype(what + " with op=Adasum", tensor, ADASUM_DTYPES, name)
    from tf_ring.basics import is_initialized, size
    if is_initialized() and size() & (size() - 1):
        raise NotImplementedError(
            "tf_ring.%s of '%s' with op=Adasum: Adasum on the CPU needs a power-of-two number "
            "of ranks (2, 4, 8...), and this job has %d. Use op=tf_ring.Average or Sum, or run "
            "on a power-of-two number of ranks."
            % (what, name or getattr(tensor, "name", "unnamed"), size()))


def _compressor(compression):
    from tf_ring.compression import Compression
    return Compression.none if compression is None else compression


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
    op = _resolve_op("allreduce", op, average)
    set_id = process_set_id_of(process_set, "allreduce")
    if isinstance(tensor, tf.IndexedSlices):
        from tf_ring.sparse import allreduce_indexed_slices
        return allreduce_indexed_slices(tensor, op=op, name=name, prescale_factor=prescale_factor,
                                        postscale_factor=postscale_factor, compression=compression,
                                        process_set=process_set)
    tensor = _as_tensor(tensor, "allreduce", name)
    _check_dtype("allreduce", tensor, REDUCE_DTYPES, name)
    if op == Adasum:
        _check_adasum("allreduce", tensor, name)
    compression = _compressor(compression)
    compressed, ctx = compression.compress(tensor)
    reduced = OPS.tf_ring_allreduce(
        compressed, reduce_op=op, prescale_factor=prescale_factor,
        postscale_factor=postscale_factor, tensor_name=_auto_name("allreduce", tensor, name),
        process_set_id=set_id)
    return compression.decompress(reduced, ctx)


def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Concatenates `tensor` from every rank along dimension 0, in rank order.

    The first dimension may differ between ranks; the others must match.
    ignore_name_scope is accepted for Horovod code and does nothing.
    process_set: gather from that set's ranks only, in their rank order.
    """
    set_id = process_set_id_of(process_set, "allgather")
    tensor = _as_tensor(tensor, "allgather", name)
    _check_dtype("allgather", tensor, MOVE_DTYPES, name)
    return OPS.tf_ring_allgather(tensor, tensor_name=_auto_name("allgather", tensor, name),
                                 process_set_id=set_id)


def broadcast(tensor, root_rank, name=None, ignore_name_scope=False,
              process_set=global_process_set):
    """Returns root_rank's `tensor` on every rank (ignore_name_scope does nothing).

    process_set: broadcast among that set's ranks; root_rank is still a
    global rank, and must be one of the set's.
    """
    set_id = process_set_id_of(process_set, "broadcast")
    tensor = _as_tensor(tensor, "broadcast", name)
    _check_dtype("broadcast", tensor, MOVE_DTYPES, name)
    return OPS.tf_ring_broadcast(tensor, root_rank=int(root_rank),
                                 tensor_name=_auto_name("broadcast", tensor, name),
                                 process_set_id=set_id)
