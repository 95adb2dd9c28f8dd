"""DistributedOptimizer for tf.compat.v1.train optimizers (graph mode)."""
import tensorflow as tf

from tf_ring.compression import Compression
from tf_ring.gradient_reduction import allreduce_gradients
from tf_ring.ops import Average


class DistributedOptimizerV1(tf.compat.v1.train.Optimizer):
    """compute_gradients returns gradients reduced over ranks; apply_gradients
    and the slots are the wrapped optimizer's. minimize() works through both."""

    def __init__(self, optimizer, name=None, use_locking=False, op=Average,
                 compression=Compression.none, sparse_as_dense=False, num_groups=0):
        super().__init__(name=name or "Distributed" + type(optimizer).__name__,
                         use_locking=use_locking)
        self._optimizer = optimizer
        self._op = op
        self._compression = compression
        self._sparse_as_dense = sparse_as_dense
        self._num_groups = num_groups

    def compute_gradients(self, *args, **kwargs):
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        if not pairs:
            return pairs
        grads, variables = zip(*pairs)
        reduced = allreduce_gradients(grads, op=self._op, compression=self._compression,
                                      sparse_as_dense=self._sparse_as_dense,
                                      num_groups=self._num_groups, name=self.get_name())
        return list(zip(reduced, variables))

    def apply_gradients(self, *args, **kwargs):
        return self._optimizer.apply_gradients(*args, **kwargs)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)
