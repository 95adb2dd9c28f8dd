"""BestModelCheckpoint: Keras's ModelCheckpoint with save_best_only, writing on rank 0 only."""
from tf_ring.runtime import basics
from tf_ring.keras import _flavor, _xla

_ModelCheckpoint = _flavor.keras_module().callbacks.ModelCheckpoint

# Keras 3 checks the file name when the callback is made; Horovod's signature
# has no filepath (its Spark estimator fills it in), so a stand-in passes the
# check and training refuses to start until a real path is set.
_STAND_IN = "tf_ring_best_model_path_not_set.keras"


class BestModelCheckpoint(_ModelCheckpoint):
    """Saves the whole model each time `monitor` improves (save_best_only), on
    rank 0 only, so ranks never write the same file at once.

    monitor, verbose, mode, save_freq: as in Keras's ModelCheckpoint (Horovod's
      arguments). Put MetricAverageCallback before it so the decision uses the
      value averaged over ranks.
    filepath: where to save (may contain {epoch} and log keys); give it here or
      set `callback.filepath` before fit(). Keras 3 needs a `.keras` name.
    """

    def __init__(self, monitor="val_loss", verbose=0, mode="auto", save_freq="epoch",
                 filepath=None):
        super().__init__(filepath=filepath or _STAND_IN, monitor=monitor, verbose=verbose,
                         save_best_only=True, save_weights_only=False, mode=mode,
                         save_freq=save_freq)
        self.filepath = filepath

    def set_model(self, model):
        super().set_model(model)
        _xla.keep_jit_only_if_compilable(model)

    def on_train_begin(self, logs=None):
        if not self.filepath:
            raise ValueError("BestModelCheckpoint has no filepath: pass "
                             "BestModelCheckpoint(..., filepath='best.keras') or set "
                             "callback.filepath before fit()")
        super().on_train_begin(logs)

    def _save_model(self, epoch, batch, logs):
        if basics.rank() != 0:
            return
        super()._save_model(epoch, batch, logs)
