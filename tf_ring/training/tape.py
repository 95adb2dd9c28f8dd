"""DistributedGradientTape and PartialDistributedGradientTape: a tf.GradientTape
whose gradients are reduced over ranks, except those of local variables."""
import tensorflow as tf

from tf_ring.collectives.compression import Compression
from tf_ring.collectives.ops import Average
from tf_ring.runtime.process_set import global_process_set
from tf_ring.training.gradient_reduction import GradientReducer
from tf_ring.training.gradient_settings import gradient_settings
from tf_ring.training.pass_accumulation import accumulator_for


class DistributedGradientTape:
    """Wraps a tf.GradientTape; gradient() returns gradients reduced over all ranks.

    Works eagerly and inside tf.function, with persistent tapes, None
    gradients (passed through) and tf.IndexedSlices (reduced through
    allgather, or densified first with sparse_as_dense=True). Every other
    attribute (watch, reset, stop_recording, ...) is the wrapped tape's.

        with tf.GradientTape() as tape:
            loss = ...
        tape = tf_ring.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)

    Arguments follow Horovod's order. gradient_predivide_factor (op=Average
    only) scales gradients by 1/f before the sum and f/size after it. groups:
    a number of nearly equal groups, or lists of variables whose gradients
    are reduced together (num_groups is its deprecated spelling). Sources
    registered with register_local_source keep their local gradient, divided
    by size() when scale_local_gradients. device_dense and device_sparse are
    accepted and ignored (CPU build). process_set: reduce over that set's
    ranks only (Average divides by its size).

    backward_passes_per_step=N accumulates gradients: each call to
    gradient() adds this rank's gradients to sums kept across steps (per
    `name` and list of sources, so a new tape and wrapper at every step
    continue the same sums); the Nth call reduces the sums over ranks
    (divided by N when average_aggregated_gradients), returns them and
    clears them. Earlier calls return zeros and reduce nothing. Apply only
    the reduced ones: `tape.reduced_this_pass` says which (a bool tensor,
    usable in `if` eagerly and in a tf.function):

        grads = tape.gradient(loss, variables)
        if tape.reduced_this_pass:
            optimizer.apply_gradients(zip(grads, variables))

    Accumulated gradients are summed and reduced dense, IndexedSlices too.
    """

    def __init__(self, tape, device_dense="", device_sparse="", compression=Compression.none,
                 sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0, num_groups=0,
                 groups=None, scale_local_gradients=True, name="DistributedGradientTape",
                 process_set=global_process_set, backward_passes_per_step=1,
                 average_aggregated_gradients=False):
        del device_dense, device_sparse  # CPU build
        if not isinstance(tape, tf.GradientTape):
            raise TypeError("DistributedGradientTape wraps a tf.GradientTape, got %r"
                            % type(tape).__name__)
        if isinstance(backward_passes_per_step, bool) or not isinstance(
                backward_passes_per_step, int) or backward_passes_per_step < 1:
            raise ValueError("DistributedGradientTape: backward_passes_per_step must be an "
                             "integer >= 1 (the number of gradient() calls summed before one "
                             "reduction), got %r" % (backward_passes_per_step,))
        self._tape = tape
        self._passes = backward_passes_per_step
        self._average_passes = average_aggregated_gradients
        self._name = name
        self._reduced = None
        self._reducer = GradientReducer(gradient_settings(
            "DistributedGradientTape", op, compression, sparse_as_dense,
            gradient_predivide_factor, num_groups, groups, scale_local_gradients, process_set),
            name)

    def __getattr__(self, attr):
        return getattr(self._tape, attr)

    def __enter__(self):
        self._tape.__enter__()
        return self

    def __exit__(self, *exc):
        return self._tape.__exit__(*exc)

    def register_local_source(self, source):
        """Keeps `source`'s gradient local: it is not reduced over ranks
        (divided by size() when scale_local_gradients, as in Horovod)."""
        self._reducer.register_local(source)

    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=tf.UnconnectedGradients.NONE, use_generic_names=False):
        del use_generic_names  # Horovod's op naming option; names here come from the graph
        grads = self._tape.gradient(target, sources, output_gradients=output_gradients,
                                    unconnected_gradients=unconnected_gradients)
        flat_grads, flat_sources = tf.nest.flatten(grads), tf.nest.flatten(sources)
        if self._passes == 1:
            reduced = self._reducer.reduce(flat_grads, flat_sources)
            self._reduced = True
        else:
            scale = 1.0 / self._passes if self._average_passes else 1.0
            accumulator = accumulator_for(self._name, flat_sources)
            reduced, self._reduced = accumulator.add_pass(
                flat_grads, flat_sources, self._passes,
                lambda sums, variables: self._reducer.reduce(sums, variables, scale=scale))
        return tf.nest.pack_sequence_as(grads, reduced)

    @property
    def reduced_this_pass(self):
        """Whether the last gradient() call reduced and returned gradients
        (always, unless backward_passes_per_step > 1: then a bool tensor,
        true on every Nth call). None before the first call."""
        return self._reduced

    def get_local_and_global_gradients(self, target, sources, output_gradients=None,
                                       use_generic_names=False):
        """Horovod's split view of gradient(): two lists of (variable, gradient)
        pairs, in the order of `sources`: first the local sources' (this rank's
        own gradient, divided by size() when scale_local_gradients), then the
        others' (reduced over ranks). Each call runs gradient() once, so call it
        on a persistent tape if gradient() was called before."""
        grads = self.gradient(target, sources, output_gradients=output_gradients,
                              use_generic_names=use_generic_names)
        local_pairs, global_pairs = [], []
        for var, grad in zip(tf.nest.flatten(sources), tf.nest.flatten(grads)):
            pairs = local_pairs if self._reducer.is_local(var) else global_pairs
            pairs.append((var, grad))
        return local_pairs, global_pairs


def local_layer_variables(local_layers, what):
    """The trainable variables of `local_layers` (one Keras layer or a list)."""
    if local_layers is None:
        return []
    layers = local_layers if isinstance(local_layers, (list, tuple, set)) else [local_layers]
    variables = []
    for layer in layers:
        if not hasattr(layer, "trainable_weights") or not hasattr(layer, "built"):
            raise ValueError("%s: local_layers must be Keras layers, got %r"
                             % (what, type(layer).__name__))
        variables.extend(layer.trainable_weights)
    return variables


def PartialDistributedGradientTape(gradtape, device_dense="", device_sparse="",  # noqa: N802
                                   compression=Compression.none, sparse_as_dense=False,
                                   op=Average, gradient_predivide_factor=1.0, num_groups=0,
                                   groups=None, local_layers=None, scale_local_gradients=True,
                                   process_set=global_process_set, backward_passes_per_step=1,
                                   average_aggregated_gradients=False):
    """A DistributedGradientTape whose `local_layers` (Keras layers) keep their
    own gradients: their trainable variables are registered as local sources,
    so model-parallel parts (an embedding on one rank, experts) train locally
    while the rest is averaged. Build the layers before wrapping the tape.
    backward_passes_per_step accumulates as in DistributedGradientTape."""
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression,
                                   sparse_as_dense, op, gradient_predivide_factor, num_groups,
                                   groups, scale_local_gradients, process_set=process_set,
                                   backward_passes_per_step=backward_passes_per_step,
                                   average_aggregated_gradients=average_aggregated_gradients)
    for var in local_layer_variables(local_layers, "PartialDistributedGradientTape"):
        tape.register_local_source(var)
    return tape
