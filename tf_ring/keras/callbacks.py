"""Keras callbacks for tf_ring training; they work with Keras 3 and with tf_keras.

A model compiled with jit_compile=True keeps XLA on: its train step, with
the gradients' allreduce, compiles with XLA. Only on a build without XLA
lowering (tf_ring._xla_support False) does every callback here turn XLA off
for the train step of a model that trains with a tf_ring optimizer, with a
warning (see tf_ring.keras._xla).
"""
import numpy as np
import tensorflow as tf

from tf_ring.runtime import basics
from tf_ring.collectives import ops
from tf_ring.training.gradient_reduction import variable_key
from tf_ring.keras import _flavor, _stop_agreement, _xla
from tf_ring.keras._broadcast import broadcast_variables
from tf_ring.keras._checkpoint import BestModelCheckpoint  # noqa: F401 (exported here)
from tf_ring.keras._sharded_state import own_keys
from tf_ring.keras._learning_rate import MomentumCorrection, get_learning_rate, set_learning_rate
from tf_ring.runtime.process_set import global_process_set

_Callback = _flavor.keras_module().callbacks.Callback


class _TfRingCallback(_Callback):
    def set_model(self, model):
        super().set_model(model)
        # Keras calls set_model before it builds the train function; XLA
        # goes off only where the step cannot compile (build without lowering).
        _xla.keep_jit_only_if_compilable(model)
        # A stop on any rank stops fit() on all (see _stop_agreement).
        _stop_agreement.hook_after_callbacks(model, getattr(self, "process_set",
                                                            global_process_set))


class BroadcastGlobalVariablesCallback(_TfRingCallback):
    """Makes model weights and optimizer state equal to root_rank's on every rank.

    At train begin it builds the optimizer where Keras allows it (Keras 3) and
    broadcasts the model's and the optimizer's variables, so the first step
    already starts from the same state. Optimizers that create their slots at
    the first apply (tf_keras) get a second broadcast after the first batch.

    local_variables (or register_local_var): variables that stay as each rank
    has them, e.g. those of PartialDistributedOptimizer's local layers.
    device is accepted for Horovod code (CPU build). process_set (keyword):
    broadcast among that set's ranks only (root_rank is a global rank in it).
    """

    def __init__(self, root_rank, device="", local_variables=None, *args,
                 process_set=global_process_set, **kwargs):
        super().__init__(*args, **kwargs)
        del device
        self.root_rank = root_rank
        self.process_set = process_set
        self._local_keys = set()
        for var in local_variables or ():
            self.register_local_var(var)
        self._done = False
        self._optimizer_variable_count = 0

    def register_local_var(self, var):
        """Leaves `var` out of the broadcast."""
        self._local_keys.add(variable_key(var))

    def _shared(self, variables):
        return [v for v in variables if variable_key(v) not in self._local_keys]

    def _optimizer_variables(self):
        """The optimizer's variables that every rank holds alike: with
        shard_state=True each rank's slots are its own share, not broadcast
        (the pieces they update take their rows from the broadcast weights)."""
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is None:
            return []
        variables = list(optimizer.variables) if not callable(optimizer.variables) else list(
            optimizer.variables())
        own = own_keys(optimizer)
        return [v for v in variables if id(v) not in own]

    def on_train_begin(self, logs=None):
        if self._done:
            return
        optimizer = getattr(self.model, "optimizer", None)
        if (optimizer is not None and _flavor.is_keras3_optimizer_class(type(optimizer))
                and not optimizer.built):
            optimizer.build(self.model.trainable_variables)
        optimizer_variables = self._optimizer_variables()
        broadcast_variables(self._shared(list(self.model.variables) + optimizer_variables),
                            self.root_rank, "broadcast_global_variables.begin", self.process_set)
        self._optimizer_variable_count = len(optimizer_variables)

    def on_train_batch_end(self, batch, logs=None):
        if self._done:
            return
        self._done = True
        optimizer_variables = self._optimizer_variables()
        if len(optimizer_variables) != self._optimizer_variable_count:
            broadcast_variables(self._shared(list(self.model.variables) + optimizer_variables),
                                self.root_rank, "broadcast_global_variables.first_batch",
                                self.process_set)


class MetricAverageCallback(_TfRingCallback):
    """Replaces every numeric value in the epoch-end logs with its mean over ranks.

    Put it before callbacks that read the logs (checkpointing, early stopping,
    LR reduction) so they all see the averaged values. process_set
    (keyword): average over that set's ranks only.
    """

    def __init__(self, *args, process_set=global_process_set, **kwargs):
        super().__init__(*args, **kwargs)
        self.process_set = process_set
        self._average_fns = {}

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        names = sorted(k for k, v in logs.items() if _is_number(v))
        if not names:
            return
        values = [tf.constant(float(np.asarray(logs[k])), tf.float64) for k in names]
        averaged = self._average_fn(tuple(names))(values)
        for name, value in zip(names, averaged):
            logs[name] = float(value.numpy())

    def _average_fn(self, names):
        if names not in self._average_fns:
            @tf.function(autograph=False)
            def average(values):
                return [ops.allreduce(v, op=ops.Average, name="metric_average." + n,
                                      process_set=self.process_set)
                        for n, v in zip(names, values)]
            self._average_fns[names] = average
        return self._average_fns[names]


def _is_number(value):
    try:
        return np.asarray(value).size == 1 and np.issubdtype(np.asarray(value).dtype, np.number)
    except (TypeError, ValueError):
        return False


class LearningRateScheduleCallback(_TfRingCallback):
    """Sets lr = initial_lr * multiplier(epoch) from start_epoch until end_epoch (exclusive).

    multiplier: a number (then the schedule is a staircase) or a function of the
      epoch. staircase=True changes the lr at the start of each epoch with an
      integer epoch; staircase=False changes it before every batch with a
      fractional epoch, epoch + batch / steps_per_epoch.
    momentum_correction: scale momentum by new_lr / old_lr for the step where the lr changes.
    steps_per_epoch: batches per epoch; taken from fit()'s parameters when not given.
    """

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.initial_lr = initial_lr
        if callable(multiplier):
            self.multiplier = multiplier
        else:
            constant = multiplier
            self.multiplier = lambda epoch: constant
            staircase = True
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch = None
        self._momentum = MomentumCorrection()

    def _active(self, epoch):
        return epoch >= self.start_epoch and (self.end_epoch is None or epoch < self.end_epoch)

    def _adjust(self, epoch):
        optimizer = self.model.optimizer
        old_lr = get_learning_rate(optimizer)
        new_lr = self.initial_lr * self.multiplier(epoch)
        set_learning_rate(optimizer, new_lr)
        if self.momentum_correction and old_lr > 0:
            self._momentum.apply(optimizer, new_lr / old_lr)

    def on_train_begin(self, logs=None):
        if self.steps_per_epoch is None:
            self.steps_per_epoch = (self.params or {}).get("steps")

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if not self._active(self.current_epoch):
            return
        if self.staircase:
            if batch == 0:
                self._adjust(self.current_epoch)
            return
        if not self.steps_per_epoch:
            raise ValueError("%s needs steps_per_epoch: fit() did not report the number of steps "
                             "per epoch; pass steps_per_epoch=..." % type(self).__name__)
        self._adjust(self.current_epoch + float(batch) / self.steps_per_epoch)

    def on_train_batch_end(self, batch, logs=None):
        self._momentum.restore()

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            # Horovod's key is "lr", Keras 3's "learning_rate": code may read either.
            logs["lr"] = logs["learning_rate"] = get_learning_rate(self.model.optimizer)


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Raises the lr linearly, batch by batch, to initial_lr at the end of warmup_epochs.

    Large global batches train badly if they start at the full (size-scaled)
    learning rate; this starts near the single-process rate, initial_lr / size()
    (Goyal et al., "Accurate, Large Minibatch SGD", 2017). Before each batch
    the lr is the one due when that batch ends: with the fractional epoch
    e = epoch + (batch + 1) / steps_per_epoch,
    lr = initial_lr * (e * (size() - 1) / warmup_epochs + 1) / size(),
    so the last warmup batch runs at initial_lr, which then stays.
    """

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True, steps_per_epoch=None,
                 verbose=0, *args, **kwargs):
        self.warmup_epochs = warmup_epochs
        self.verbose = verbose

        def multiplier(epoch):
            # The schedule passes epoch + batch / steps_per_epoch, the batch's start.
            epoch += 1.0 / self.steps_per_epoch
            size = basics.size()
            return (epoch * (size - 1) / warmup_epochs + 1.0) / size

        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs,
                         staircase=False, momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch, *args, **kwargs)

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.end_epoch - 1 and self.verbose > 0:
            print("\nEpoch %d: finished gradual learning rate warmup to %g."
                  % (epoch + 1, get_learning_rate(self.model.optimizer)))
