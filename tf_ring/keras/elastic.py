"""Elastic training for Keras (3 and tf_keras), with Horovod's names:
`import tf_ring.keras as hvd; hvd.elastic.KerasState(model, epoch=0)`.

The callbacks keep `state.batch` (batches finished in the current epoch) and
`state.epoch` (epochs finished) up to date and commit the state, so a
training function wrapped in `run` resumes where the last commit left off.
Like every tf_ring callback they leave XLA (jit_compile=True) on, and turn
it off (with a warning) only on a build without XLA lowering.
"""
import logging

from tf_ring.elastic import (HorovodInternalError, HostUpdateResult, HostsUpdatedInterrupt,
                             ObjectState, State, TensorFlowKerasState, run)
from tf_ring.keras import _flavor
from tf_ring.keras.callbacks import _TfRingCallback

__all__ = ["CommitStateCallback", "HorovodInternalError", "HostUpdateResult",
           "HostsUpdatedInterrupt", "KerasState", "ObjectState", "State",
           "UpdateBatchStateCallback", "UpdateEpochStateCallback", "run"]

_keras = _flavor.keras_module()
_log = logging.getLogger("tf_ring")


class KerasState(TensorFlowKerasState):
    """The model's weights, its optimizer's variables (optimizer defaults to
    model.optimizer) and plain attributes given as keywords (epoch=0, batch=0)."""

    def __init__(self, model, optimizer=None, **kwargs):
        super().__init__(model, optimizer=optimizer, backend=_keras.backend, **kwargs)


class CommitStateCallback(_TfRingCallback):
    """Commits `state` every `batches_per_commit` batches and after every epoch.

    A commit that falls due at the end of a batch or an epoch runs at the next
    batch or epoch begin (or at train end): by then every callback has updated
    the state for what has finished, whatever their order in the list, and no
    training happened in between.
    """

    def __init__(self, state, batches_per_commit=1):
        super().__init__()
        if not isinstance(batches_per_commit, int) or batches_per_commit < 1:
            raise ValueError("CommitStateCallback: batches_per_commit must be an int >= 1, got %r"
                             % (batches_per_commit,))
        self.state = state
        self.batches_per_commit = batches_per_commit
        self._left = batches_per_commit
        self._due = False

    def on_train_begin(self, logs=None):
        # A new call after a reset: count from here on every rank alike.
        self._left = self.batches_per_commit
        self._due = False

    def on_train_batch_end(self, batch, logs=None):
        self._left -= 1
        if self._left == 0:
            self._left = self.batches_per_commit
            self._due = True

    def on_epoch_end(self, epoch, logs=None):
        self._due = True

    def _commit_if_due(self):
        if self._due:
            self._due = False
            self.state.commit()

    def on_train_batch_begin(self, batch, logs=None):
        self._commit_if_due()

    def on_epoch_begin(self, epoch, logs=None):
        self._commit_if_due()

    def on_train_end(self, logs=None):
        self._commit_if_due()


class UpdateBatchStateCallback(_TfRingCallback):
    """Keeps `state.batch` = batches finished in the current epoch (0 at
    every epoch end) and resumes a restored epoch where its commit was.

    Resuming: Keras (3 and tf_keras alike) runs an epoch for as many steps as
    its data iterator was built with and ignores changes to params['steps'].
    So an epoch that starts with state.batch = n > 0 runs its first
    steps - n batches and then ends through `model.stop_training`, which
    Keras checks after every batch; the flag is cleared again at that epoch's
    end, so the following epochs run in full. Needs a known steps per epoch.
    """

    def __init__(self, state):
        super().__init__()
        self.state = state
        self._done_before = 0
        self._end_at = None
        self._stopped = False

    def on_epoch_begin(self, epoch, logs=None):
        self._done_before = int(self.state.batch)
        self._stopped = False
        steps = (self.params or {}).get("steps")
        self._end_at = steps if self._done_before and steps else None
        if self._done_before and not steps:
            _log.warning("UpdateBatchStateCallback: epoch %d resumes after batch %d, but the "
                         "number of steps per epoch is unknown, so it runs in full; pass "
                         "steps_per_epoch to fit()", epoch, self._done_before)
        elif self._end_at is not None and self._done_before >= steps:
            _log.warning("UpdateBatchStateCallback: epoch %d was committed with all %d batches "
                         "done but not ended; Keras runs at least one batch", epoch, steps)

    def on_train_batch_end(self, batch, logs=None):
        done = self._done_before + batch + 1
        self.state.batch = done
        if self._end_at is not None and done >= self._end_at and not self.model.stop_training:
            self.model.stop_training = True
            self._stopped = True

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0
        if self._stopped:
            self.model.stop_training = False
            self._stopped = False


class UpdateEpochStateCallback(_TfRingCallback):
    """Keeps `state.epoch` = epochs finished, counted across resets.

    Works with both ways of resuming fit(): fit(initial_epoch=state.epoch,
    epochs=total), where Keras numbers epochs from state.epoch, and Horovod's
    fit(epochs=total - state.epoch), where it numbers them from 0: the first
    epoch of each fit() call gives the offset.
    """

    def __init__(self, state):
        super().__init__()
        self.state = state
        self._offset = None

    def on_train_begin(self, logs=None):
        self._offset = None

    def on_epoch_begin(self, epoch, logs=None):
        if self._offset is None:
            self._offset = int(self.state.epoch) - epoch

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch = self._offset + epoch + 1
