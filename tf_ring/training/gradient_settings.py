"""How a set of gradients is reduced, as DistributedGradientTape, the v1
DistributedOptimizer and tf_ring.keras.DistributedOptimizer take it
(Horovod's arguments), checked once into one record for the gradient
reducer (gradient_reduction.py)."""
import dataclasses
import warnings

from tf_ring.collectives.compression import Compression
from tf_ring.collectives.ops import Average
from tf_ring.runtime.process_set import global_process_set, process_set_id_of

# How the dense gradients are issued. GROUPED (the tape, the v1 optimizer):
# grouped allreduces, `groups` of them (one when groups is None or 0).
# PER_GRADIENT (Keras): one allreduce per gradient in the train step's graph,
# each free to start as soon as its gradient exists, fused by the engine; one
# grouped allreduce under XLA, where separate ones would never fuse.
GROUPED = "grouped"
PER_GRADIENT = "per_gradient"


@dataclasses.dataclass(frozen=True)
class GradientSettings:
    """op, compression (an object with compress/decompress, or None for full
    precision), prescale and postscale (gradient_predivide_factor split
    around the sum), groups (None, a positive count, or lists of variables
    reduced together), scale_local_gradients (a local variable's gradient is
    divided by the set's size), the process set, and how gradients are
    issued (`batching`)."""
    op: int = Average
    compression: object = Compression.none
    sparse_as_dense: bool = False
    groups: object = None
    prescale: float = 1.0
    postscale: float = 1.0
    scale_local_gradients: bool = True
    process_set: object = global_process_set
    batching: str = GROUPED


def gradient_settings(what, op=Average, compression=Compression.none, sparse_as_dense=False,
                      gradient_predivide_factor=1.0, num_groups=0, groups=None,
                      scale_local_gradients=True, process_set=global_process_set,
                      batching=GROUPED, predivide_needs_average=True):
    """The GradientSettings of Horovod's arguments to `what` (the API's name,
    for errors). predivide_needs_average: a gradient_predivide_factor with
    another op is an error (the tape and v1 optimizer, as Horovod's); False
    ignores it there (Keras's optimizer, as Horovod's)."""
    if gradient_predivide_factor != 1.0 and op != Average and predivide_needs_average:
        raise ValueError("%s: gradient_predivide_factor needs op=tf_ring.Average (it splits the "
                         "average's division), got op=%r" % (what, op))
    process_set_id_of(process_set, what)  # registered, or a clear error
    prescale, postscale = predivide_scales(op, gradient_predivide_factor)
    return GradientSettings(op=op, compression=compression, sparse_as_dense=sparse_as_dense,
                            groups=resolve_groups(num_groups, groups), prescale=prescale,
                            postscale=postscale, scale_local_gradients=scale_local_gradients,
                            process_set=process_set, batching=batching)


def resolve_groups(num_groups, groups):
    """Horovod's rules: num_groups is the deprecated spelling of an integer
    `groups`; `groups` is a positive integer or a list of lists of variables."""
    if num_groups:
        warnings.warn("num_groups is deprecated (as in Horovod); pass groups=%d instead"
                      % num_groups, DeprecationWarning, stacklevel=4)
        if groups is None:
            groups = num_groups
    if groups is not None and not isinstance(groups, (list, tuple)):
        if not isinstance(groups, int) or groups <= 0:
            raise ValueError("groups must be a positive integer or a list of lists of "
                             "variables, got %r" % (groups,))
    return groups


def predivide_scales(op, gradient_predivide_factor):
    """(prescale, postscale) that split Average's division around the sum."""
    if gradient_predivide_factor != 1.0 and op == Average:
        return 1.0 / gradient_predivide_factor, float(gradient_predivide_factor)
    return 1.0, 1.0
