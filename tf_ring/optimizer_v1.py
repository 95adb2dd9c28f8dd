"""DistributedOptimizer for tf.compat.v1.train optimizers (graph mode)."""
import tensorflow as tf

from tf_ring.compression import Compression
from tf_ring.gradient_reduction import (predivide_scales, reduce_except_local, resolve_groups,
                                        variable_key)
from tf_ring.ops import Average
from tf_ring.process_set import global_process_set, process_set_id_of
from tf_ring.training.powersgd_reduce import powersgd_of


class DistributedOptimizerV1(tf.compat.v1.train.Optimizer):
    """compute_gradients returns gradients reduced over ranks; apply_gradients
    and the slots are the wrapped optimizer's. minimize() works through both.

    Arguments follow Horovod's order. device_dense and device_sparse are
    accepted and ignored (CPU build); backward_passes_per_step must be 1, so
    average_aggregated_gradients has nothing to act on. Variables registered
    with register_local_var keep their local gradient (divided by size() when
    scale_local_gradients). process_set: reduce over that set's ranks only.
    """

    def __init__(self, optimizer, name=None, use_locking=False, device_dense="", device_sparse="",
                 compression=Compression.none, sparse_as_dense=False, backward_passes_per_step=1,
                 op=Average, gradient_predivide_factor=1.0, average_aggregated_gradients=False,
                 num_groups=0, groups=None, scale_local_gradients=True,
                 process_set=global_process_set):
        process_set_id_of(process_set, "DistributedOptimizer")  # registered, or a clear error
        powersgd_of(compression, "DistributedOptimizer", op)  # usable, or a clear error
        self._process_set = process_set
        del device_dense, device_sparse, average_aggregated_gradients
        if backward_passes_per_step != 1:
            raise ValueError("tf_ring.DistributedOptimizer for v1 optimizers supports only "
                             "backward_passes_per_step=1.")
        if gradient_predivide_factor != 1.0 and op != Average:
            raise ValueError("DistributedOptimizer: gradient_predivide_factor needs "
                             "op=tf_ring.Average, got op=%r" % (op,))
        super().__init__(name=name or "Distributed" + type(optimizer).__name__,
                         use_locking=use_locking)
        self._optimizer = optimizer
        self._op = op
        self._compression = compression
        self._sparse_as_dense = sparse_as_dense
        self._groups = resolve_groups(num_groups, groups)
        self._prescale, self._postscale = predivide_scales(op, gradient_predivide_factor)
        self._scale_local_gradients = scale_local_gradients
        self._local_keys = set()

    def register_local_var(self, var):
        """Keeps `var`'s gradient local: it is not reduced over ranks."""
        self._local_keys.add(variable_key(var))

    def compute_gradients(self, *args, **kwargs):
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        if not pairs:
            return pairs
        grads, variables = zip(*pairs)
        reduced = reduce_except_local(
            grads, variables, self._local_keys, self._scale_local_gradients, op=self._op,
            compression=self._compression, sparse_as_dense=self._sparse_as_dense,
            groups=self._groups, name=self.get_name(), prescale_factor=self._prescale,
            postscale_factor=self._postscale, process_set=self._process_set)
        return list(zip(reduced, variables))

    def apply_gradients(self, *args, **kwargs):
        return self._optimizer.apply_gradients(*args, **kwargs)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)
