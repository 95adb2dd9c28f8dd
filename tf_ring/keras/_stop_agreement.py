"""Every rank leaves fit() at the same batch when any rank's callbacks stop it.

A callback that sets model.stop_training on some ranks only (EarlyStopping
or TerminateOnNaN added on rank 0 alone, a user's own callback) would make
those ranks leave fit() while the others wait in the next batch's gradient
allreduce for ever. So after every batch and every epoch, once all
callbacks have run, the ranks agree: one allreduce (Sum) of each rank's
stop flag, and a nonzero sum stops fit() on every rank.

"Once all callbacks have run": fit() runs its callbacks in list order and
appends its History callback after the user's (Keras 3 and tf_keras alike)
and sets model.history to it. A tf_ring callback's on_train_begin hooks the
agreement onto that History object's batch and epoch ends, so it runs after
every callback the user passed, wherever the tf_ring callbacks are listed.
Only fit()s with at least one tf_ring callback agree; the cost is one
scalar allreduce per batch (docs/keras.md gives the measured figure).
"""
import tensorflow as tf

from tf_ring.collectives import ops
from tf_ring.runtime.process_set import global_process_set

_MARK = "_tf_ring_stop_agreement"
NAME = "tf_ring.keras.stop_agreement"


def hook_after_callbacks(model, process_set=global_process_set):
    """Makes this fit()'s History callback agree on stopping after its own
    batch and epoch ends. Once per History object: every tf_ring callback
    of one fit() calls it."""
    history = getattr(model, "history", None)
    if history is None or getattr(history, _MARK, False):
        return False
    setattr(history, _MARK, True)
    batch_end, epoch_end = history.on_train_batch_end, history.on_epoch_end

    def on_train_batch_end(batch, logs=None):
        batch_end(batch, logs)
        agree(model, process_set)

    def on_epoch_end(epoch, logs=None):
        epoch_end(epoch, logs)
        agree(model, process_set)

    history.on_train_batch_end = on_train_batch_end
    history.on_epoch_end = on_epoch_end
    return True


def agree(model, process_set=global_process_set):
    """Stops fit() on every rank of the set when it is stopped on any."""
    vote = tf.constant([1 if model.stop_training else 0], tf.int32)
    stops = int(ops.allreduce(vote, op=ops.Sum, name=NAME, process_set=process_set).numpy()[0])
    if stops and not model.stop_training:
        model.stop_training = True
    return stops
