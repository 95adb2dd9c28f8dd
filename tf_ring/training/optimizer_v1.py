"""DistributedOptimizer for tf.compat.v1.train optimizers (graph mode)."""
import tensorflow as tf

from tf_ring.collectives.compression import Compression
from tf_ring.collectives.ops import Average
from tf_ring.runtime.process_set import global_process_set
from tf_ring.training.gradient_reduction import GradientReducer
from tf_ring.training.gradient_settings import gradient_settings


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
        del device_dense, device_sparse, average_aggregated_gradients
        if backward_passes_per_step != 1:
            raise ValueError("tf_ring.DistributedOptimizer for v1 optimizers supports only "
                             "backward_passes_per_step=1.")
        settings = gradient_settings(
            "DistributedOptimizer", op, compression, sparse_as_dense, gradient_predivide_factor,
            num_groups, groups, scale_local_gradients, process_set)
        super().__init__(name=name or "Distributed" + type(optimizer).__name__,
                         use_locking=use_locking)
        self._optimizer = optimizer
        self._reducer = GradientReducer(settings, self.get_name())

    def register_local_var(self, var):
        """Keeps `var`'s gradient local: it is not reduced over ranks."""
        self._reducer.register_local(var)

    def compute_gradients(self, *args, **kwargs):
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        if not pairs:
            return pairs
        grads, variables = zip(*pairs)
        return list(zip(self._reducer.reduce(grads, variables), variables))

    def apply_gradients(self, *args, **kwargs):
        return self._optimizer.apply_gradients(*args, **kwargs)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)
