"""DistributedGradientTape: a tf.GradientTape whose gradients are reduced over ranks."""
import tensorflow as tf

from tf_ring.compression import Compression
from tf_ring.gradient_reduction import allreduce_gradients
from tf_ring.ops import Average


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
    """

    def __init__(self, tape, op=Average, compression=Compression.none, sparse_as_dense=False,
                 num_groups=0, device_dense="", device_sparse="", name="DistributedGradientTape"):
        # device_dense / device_sparse are accepted for Horovod compatibility;
        # this build runs on CPU only.
        del device_dense, device_sparse
        if not isinstance(tape, tf.GradientTape):
            raise TypeError("DistributedGradientTape wraps a tf.GradientTape, got %r"
                            % type(tape).__name__)
        self._tape = tape
        self._op = op
        self._compression = compression
        self._sparse_as_dense = sparse_as_dense
        self._num_groups = num_groups
        self._name = name

    def __getattr__(self, attr):
        return getattr(self._tape, attr)

    def __enter__(self):
        self._tape.__enter__()
        return self

    def __exit__(self, *exc):
        return self._tape.__exit__(*exc)

    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=tf.UnconnectedGradients.NONE):
        grads = self._tape.gradient(target, sources, output_gradients=output_gradients,
                                    unconnected_gradients=unconnected_gradients)
        flat = tf.nest.flatten(grads)
        reduced = allreduce_gradients(flat, op=self._op, compression=self._compression,
                                      sparse_as_dense=self._sparse_as_dense,
                                      num_groups=self._num_groups, name=self._name)
        return tf.nest.pack_sequence_as(grads, reduced)
