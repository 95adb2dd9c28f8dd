"""DistributedOptimizer: the user's optimizer class, with gradients averaged over ranks.

The wrapper is a subclass of the user's optimizer class, made on the fly and
named like it, so compile(), get_config()/from_config(), learning-rate
schedules and model.save() see the optimizer they expect. Only the step that
receives gradients changes: Keras 3's `apply` (called by apply_gradients from
the trainer's train_step) and tf_keras's `apply_gradients` (called by minimize).
All allreduces are issued in the train-step graph, where the engine fuses them.
Under a loss-scale optimizer they move before its finiteness check (_loss_scale).
"""
import functools

import tensorflow as tf

from tf_ring.collectives import ops
from tf_ring.collectives.compression import Compression
from tf_ring.keras import _flavor, _powersgd, _sharded_state, _xla
from tf_ring.keras._aggregation import LocalGradientAccumulator
from tf_ring.keras._loss_scale import PreReduced, install_keras3_hook, tf_keras_aggregate
from tf_ring.runtime.process_set import global_process_set
from tf_ring.training.gradient_reduction import GradientReducer, kept_as_the_optimizer_gets_them
from tf_ring.training.gradient_settings import PER_GRADIENT, gradient_settings
from tf_ring.training.tape import local_layer_variables


class _Settings:
    """What the wrapper needs at apply time; a plain object so Keras does not track it."""

    def __init__(self, op=ops.Average, compression=Compression.none, backward_passes_per_step=1,
                 average_aggregated_gradients=False, sparse_as_dense=False,
                 gradient_predivide_factor=1.0, num_groups=0, groups=None,
                 scale_local_gradients=True, process_set=global_process_set):
        if op not in (ops.Average, ops.Sum, ops.Adasum):
            raise ValueError("DistributedOptimizer: op must be tf_ring.Average, Sum or Adasum, got %r"
                             % (op,))
        if int(backward_passes_per_step) < 1:
            raise ValueError("DistributedOptimizer: backward_passes_per_step must be >= 1, got %r"
                             % (backward_passes_per_step,))
        # Every gradient gets its own allreduce in the step's graph, where the engine
        # fuses them (PER_GRADIENT), so groups only gets Horovod's validation; a
        # gradient_predivide_factor with Sum is ignored, as in Horovod's Keras.
        self.reducer = GradientReducer(gradient_settings(
            "DistributedOptimizer", op, compression, sparse_as_dense, gradient_predivide_factor,
            num_groups, groups, scale_local_gradients, process_set, batching=PER_GRADIENT,
            predivide_needs_average=False), "tf_ring.keras")
        self.passes = int(backward_passes_per_step)
        # Horovod semantics: the locally summed gradients are divided by N only on request.
        self.aggregate_scale = 1.0 / self.passes if average_aggregated_gradients else 1.0
        self.accumulator = LocalGradientAccumulator(self.passes) if self.passes > 1 else None
        # Set while a loss-scale optimizer around this one has reduced the gradients
        # before its finiteness check (see _loss_scale).
        self.reduced_by_caller = False
        self.pre_reduced = PreReduced()
        self.applying = False
        self.powersgd = None  # this optimizer's own PowerSGD copy (_powersgd.attach)
        self.sharded = None  # shard_state=True: a _sharded_state.ShardedState


def _register_local_var(optimizer, var):
    if optimizer._tf_ring_settings.sharded is not None:
        _sharded_state.refuse_local_variables()
    optimizer._tf_ring_settings.reducer.register_local(var)


def _keras3_subclass(base):
    class Keras3Distributed(base):
        register_local_var = _register_local_var

        def build(self, variables):
            if self._tf_ring_settings.sharded is not None:
                return self._tf_ring_settings.sharded.build(self, base, variables)
            base.build(self, variables)
            _powersgd.build_state(self, variables)

        def add_variable_from_reference(self, reference_variable, *args, **kwargs):
            slot = base.add_variable_from_reference(self, reference_variable, *args, **kwargs)
            if self._tf_ring_settings.sharded is not None:
                self._tf_ring_settings.sharded.note_slot(reference_variable, slot)
            return slot

        def save_own_variables(self, store):
            if self._tf_ring_settings.sharded is not None:
                _sharded_state.refuse_saving(self._tf_ring_settings.sharded.rank,
                                             self._tf_ring_settings.sharded.plan.size)
            return base.save_own_variables(self, store)

        def apply(self, grads, trainable_variables=None):
            settings = self._tf_ring_settings
            _xla.raise_if_not_compilable(settings)
            if settings.sharded is not None:
                return settings.sharded.apply(self, base, grads, trainable_variables)
            if trainable_variables is None:
                variables = self._trainable_variables
            else:
                trainable_variables = list(trainable_variables)
                variables = trainable_variables
            grads = kept_as_the_optimizer_gets_them(grads, settings.accumulator is not None)
            if settings.reduced_by_caller:
                return base.apply(self, grads, trainable_variables)
            if settings.accumulator is None:
                return base.apply(self, settings.reducer.reduce(grads, variables),
                                  trainable_variables)
            if not self.built:
                # Build outside the tf.cond below so slot variables are not made in a branch.
                import keras
                with keras.name_scope(self.name, caller=self):
                    self.build(variables)

            def reduce_and_apply(totals):
                base.apply(self, settings.reducer.reduce(totals, variables,
                                                         settings.aggregate_scale), variables)

            def count_skipped_pass():
                self._iterations.assign_add(1)

            settings.accumulator.step(grads, variables, reduce_and_apply, count_skipped_pass)

    return Keras3Distributed


def _reduce_and_apply_gradients(optimizer, base, pairs, args, kwargs):
    settings = optimizer._tf_ring_settings
    grads = kept_as_the_optimizer_gets_them([g for g, _ in pairs], settings.accumulator is not None)
    variables = [v for _, v in pairs]
    _powersgd.build_state(optimizer, variables)  # not inside the tf.cond below
    if settings.accumulator is None:
        reduced = settings.reducer.reduce(grads, variables)
        return base.apply_gradients(optimizer, list(zip(reduced, variables)), *args, **kwargs)
    with tf.init_scope():
        iterations = optimizer.iterations  # created here, not inside a cond branch

    def reduce_and_apply(totals):
        reduced = settings.reducer.reduce(totals, variables, settings.aggregate_scale)
        base.apply_gradients(optimizer, list(zip(reduced, variables)), *args, **kwargs)

    def count_skipped_pass():
        iterations.assign_add(1)

    applied = settings.accumulator.step(grads, variables, reduce_and_apply, count_skipped_pass)
    if _flavor.is_tf_keras_legacy_optimizer_class(base) and not tf.executing_eagerly():
        # What legacy apply_gradients returns in a graph: an op (a loss-scale
        # optimizer's tf.cond pairs it with its own skip-branch op).
        return tf.group(applied)
    return iterations


def _tf_keras_subclass(base):
    class TfKerasDistributed(base):
        register_local_var = _register_local_var

        def apply_gradients(self, grads_and_vars, *args, **kwargs):
            settings = self._tf_ring_settings
            _xla.raise_if_not_compilable(settings)
            pairs = list(grads_and_vars)
            # The base class aggregates again through the hooks below: a pass-through then.
            settings.applying = True
            try:
                if settings.pre_reduced.take([g for g, _ in pairs]):
                    return base.apply_gradients(self, pairs, *args, **kwargs)
                return _reduce_and_apply_gradients(self, base, pairs, args, kwargs)
            finally:
                settings.applying = False

    if hasattr(base, "build") and not _flavor.is_tf_keras_legacy_optimizer_class(base):
        def build(self, var_list):
            base.build(self, var_list)
            _powersgd.build_state(self, var_list)
        TfKerasDistributed.build = build

    # A loss-scale optimizer aggregates through these before its finiteness check.
    for hook in ("aggregate_gradients", "_aggregate_gradients"):
        if hasattr(base, hook):
            setattr(TfKerasDistributed, hook, functools.partialmethod(
                tf_keras_aggregate, getattr(base, hook)))
    return TfKerasDistributed


_SUBCLASSES = {}


def distributed_class(base):
    """The tf_ring subclass of optimizer class `base` (one per base class)."""
    if base not in _SUBCLASSES:
        if _flavor.is_keras3_optimizer_class(base):
            install_keras3_hook()
            cls = _keras3_subclass(base)
        elif _flavor.is_tf_keras_optimizer_class(base):
            cls = _tf_keras_subclass(base)
        else:
            raise TypeError("tf_ring.keras.DistributedOptimizer takes a Keras 3 (keras.optimizers) "
                            "or tf_keras optimizer, got %s" % base.__qualname__)
        # Look like the user's class to serialization (class name and module).
        cls.__name__ = base.__name__
        cls.__qualname__ = base.__qualname__
        cls.__module__ = base.__module__
        cls.__doc__ = base.__doc__
        _SUBCLASSES[base] = cls
    return _SUBCLASSES[base]


def _base_class(optimizer):
    cls = type(optimizer)
    if getattr(optimizer, "_tf_ring_settings", None) is not None:
        raise ValueError("this optimizer is already a tf_ring DistributedOptimizer; wrap it once")
    return cls


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",  # noqa: N802
                         compression=Compression.none, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=ops.Average, backward_passes_per_step=1,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         scale_local_gradients=True, process_set=global_process_set,
                         shard_state=False):
    """Returns a new optimizer of `optimizer`'s class, made from its config, that
    averages (op=Average) or sums (op=Sum) gradients over all ranks before applying them.

    Arguments follow Horovod's order.
    compression: an object with compress(tensor) -> (tensor, ctx) and
      decompress(tensor, ctx), such as tf_ring.Compression.fp16; Compression.none
      (or None) sends full precision.
    sparse_as_dense: IndexedSlices gradients (an Embedding's) become dense
      tensors before the allreduce. Without it they are reduced through
      allgather and reach the wrapped optimizer as IndexedSlices, as they
      would without tf_ring (its sparse update math, e.g. Adam's, unchanged);
      they are densified anyway with backward_passes_per_step > 1 and
      inside XLA (docs/keras.md, "Sparse gradients").
    gradient_predivide_factor: with op=Average, gradients are scaled by 1/f
      before the sum and f/size after it (ignored for Sum, as in Horovod).
    backward_passes_per_step: sum gradients locally over this many calls and
      reduce and apply on every Nth call; the optimizer's iterations count every call.
    average_aggregated_gradients: divide those local sums by backward_passes_per_step.
    groups / num_groups: validated and otherwise not needed: every gradient's
      allreduce is issued in the step's graph and the engine fuses them.
    scale_local_gradients: gradients of variables registered with
      register_local_var (or PartialDistributedOptimizer's local_layers) are
      not reduced; with this flag they are divided by size(), as in Horovod.
    process_set: reduce over that set's ranks only (Average divides by its
      size); every member trains the model, other ranks must not step it.
    name, device_dense, device_sparse: accepted for Horovod code; the optimizer
      keeps its own name and config (CPU build).
    shard_state: Keras 3 only. Each rank keeps the optimizer's state (Adam's
      m and v, ...) for its 1/size share of the parameters, reduce-scatters
      the gradients and allgathers the updated parameters (docs/sharded-state.md,
      which lists what it does not support yet: those raise ValueError here).
    """
    del name, device_dense, device_sparse
    if shard_state:
        _sharded_state.check_can_shard(optimizer, op, compression, backward_passes_per_step,
                                       process_set)
    settings = _Settings(op, compression, backward_passes_per_step, average_aggregated_gradients,
                         sparse_as_dense, gradient_predivide_factor, num_groups, groups,
                         scale_local_gradients, process_set)
    if shard_state:
        settings.sharded = _sharded_state.ShardedState(settings.reducer)
    cls = distributed_class(_base_class(optimizer))
    wrapped = cls.from_config(optimizer.get_config())
    wrapped._tf_ring_settings = settings
    _powersgd.attach(wrapped)
    return wrapped


def PartialDistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",  # noqa: N802
                                compression=Compression.none, sparse_as_dense=False,
                                gradient_predivide_factor=1.0, op=ops.Average,
                                backward_passes_per_step=1, average_aggregated_gradients=False,
                                groups=None, local_layers=None, scale_local_gradients=True,
                                process_set=global_process_set):
    """A DistributedOptimizer whose `local_layers` (built Keras layers) keep
    their own gradients: their trainable variables are registered as local
    with register_local_var; everything else is reduced over ranks."""
    wrapped = DistributedOptimizer(optimizer, name, device_dense, device_sparse, compression,
                                   sparse_as_dense, gradient_predivide_factor, op,
                                   backward_passes_per_step, average_aggregated_gradients,
                                   groups=groups, scale_local_gradients=scale_local_gradients,
                                   process_set=process_set)
    for var in local_layer_variables(local_layers, "PartialDistributedOptimizer"):
        wrapped.register_local_var(var)
    return wrapped


def make_distributed_in_place(optimizer, local_variables=(), **settings):
    """Turns an existing optimizer (e.g. one just loaded with its state) into a
    tf_ring one without rebuilding it, so its variables keep their values.
    `settings`: DistributedOptimizer's keyword arguments (name and devices aside)."""
    settings = _Settings(**settings)
    optimizer.__class__ = distributed_class(_base_class(optimizer))
    optimizer._tf_ring_settings = settings
    _powersgd.attach(optimizer)
    for var in local_variables:
        optimizer.register_local_var(var)
    return optimizer
