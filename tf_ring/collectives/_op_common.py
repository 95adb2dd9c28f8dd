"""What every collective's Python wrapper shares: the reduce ops, the
dtypes each collective takes, input checks, and the names that identify a
tensor to every rank. The bottom of the op layer: it imports only
_eager_names, so ops, sparse, grouped and exchange can all use it."""
import re
import weakref

import tensorflow as tf

from tf_ring.collectives._eager_names import eager_name
from tf_ring.runtime.topology import is_initialized, size

# Reduce ops; values match the engine's wire format.
Sum = 0
Average = 1
Min = 2
Max = 3
Product = 4
Adasum = 5
REDUCE_OP_NAMES = {Sum: "Sum", Average: "Average", Min: "Min", Max: "Max", Product: "Product",
                    Adasum: "Adasum"}
ADASUM_DTYPES = (tf.float16, tf.float32, tf.float64)

_EAGER_TENSOR = type(tf.constant(0))  # TensorFlow's EagerTensor class, not exported

REDUCE_DTYPES = (tf.uint8, tf.int8, tf.uint16, tf.int16, tf.int32, tf.int64, tf.float16,
                 tf.bfloat16, tf.float32, tf.float64)
MOVE_DTYPES = REDUCE_DTYPES + (tf.bool,)


def normalize_name(name):
    """Node-name-safe version of a user or tensor name."""
    return re.sub(r"[^a-zA-Z0-9_./-]", "_", name)


def auto_name(prefix, tensor, name):
    """The name that identifies this tensor to every rank.

    In graphs (tf.function, v1) the tensor's own name is stable and identical
    on every rank running the same code. Eagerly there is no such name: the
    op and the calling thread stand in (see _eager_names).

    An eager tensor made outside a tf.function and used inside it has no name
    (Tensor.name raises under eager execution); the op captures it as a
    placeholder named after the eager tensor's process-wide id, which differs
    between ranks that ran different eager ops before. It is named by its
    place in the graph instead: prefix_captured, prefix_captured_1, ... in the
    order the function's code reaches them, the same on every rank.
    """
    if tf.executing_eagerly():
        return normalize_name(name) if name else eager_name(prefix)
    if name:
        base = normalize_name(name)
    elif isinstance(tensor, _EAGER_TENSOR):
        base = prefix + "_captured"
    else:
        base = "%s_%s" % (prefix, normalize_name(tensor.name))
    return unique_in_graph(base)


# Collective names handed out in each graph. As TF does with node names (and
# Horovod with the collective names it takes from them), a second collective
# of the same tensor, or with the same name=, in one graph gets name_1, ...:
# both can then be in flight in one step. Every rank builds the same graph in
# the same order, so every rank derives the same names.
_GRAPH_NAMES = weakref.WeakKeyDictionary()


def unique_in_graph(base):
    used = _GRAPH_NAMES.setdefault(tf.compat.v1.get_default_graph(), set())
    candidate, suffix = base, 0
    while candidate in used:
        suffix += 1
        candidate = "%s_%d" % (base, suffix)
    used.add(candidate)
    return candidate


# The dtype enums of each allowed tuple, keyed by the tuple's id (the tuples
# are module constants): `dtype in tuple` compares DTypes one by one, which
# measured about 3 us of a 4 KB eager allreduce's 20.
_ALLOWED_ENUMS = {}


def check_dtype(what, tensor, allowed, name):
    enums = _ALLOWED_ENUMS.get(id(allowed))
    if enums is None:
        enums = _ALLOWED_ENUMS[id(allowed)] = (allowed, frozenset(d.as_datatype_enum for d in allowed))
    if tensor.dtype.as_datatype_enum not in enums[1]:
        raise TypeError(
            "tf_ring.%s of tensor '%s': dtype %s is not supported; supported dtypes are %s. "
            "Cast the tensor (for example with tf.cast) before the collective."
            % (what, name or getattr(tensor, "name", "?"), tensor.dtype.name,
               ", ".join(d.name for d in allowed)))


def as_tensor(tensor, what, name):
    if isinstance(tensor, tf.Tensor):
        return tensor  # what convert_to_tensor returns, without its dispatch (1.5 us)
    try:
        return tf.convert_to_tensor(tensor)
    except (TypeError, ValueError) as e:
        raise TypeError("tf_ring.%s of '%s': cannot convert %r to a tensor: %s"
                        % (what, name, type(tensor).__name__, e)) from e


def resolve_op(what, op, average):
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
    if op not in REDUCE_OP_NAMES:
        raise ValueError("tf_ring.%s: unknown op %r; use one of tf_ring.%s"
                         % (what, op, ", tf_ring.".join(REDUCE_OP_NAMES.values())))
    return op


def check_adasum(what, tensor, name):
    """Adasum's rules, as in Horovod: float16/32/64, and on the CPU a
    power-of-two number of ranks (NotImplementedError otherwise). Before
    init() the size is unknown; the coordinator checks it again at run time."""
    check_dtype(what + " with op=Adasum", tensor, ADASUM_DTYPES, name)
    if is_initialized() and size() & (size() - 1):
        raise NotImplementedError(
            "tf_ring.%s of '%s' with op=Adasum: Adasum on the CPU needs a power-of-two number "
            "of ranks (2, 4, 8...), and this job has %d. Use op=tf_ring.Average or Sum, or run "
            "on a power-of-two number of ranks."
            % (what, name or getattr(tensor, "name", "unnamed"), size()))


def compressor(compression):
    from tf_ring.collectives.compression import Compression
    return Compression.none if compression is None else compression
