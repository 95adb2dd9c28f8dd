"""TensorFlowState (a list of tf.Variables) and TensorFlowKerasState (a
model and its optimizer), with plain attributes as ObjectState has them."""
import tensorflow as tf

from tf_ring.elastic import restart
from tf_ring.elastic.snapshot import VariableSnapshot
from tf_ring.elastic.state import ObjectState


class _VariablesState(ObjectState):
    """ObjectState plus the variables of a VariableSnapshot."""

    def _start(self, get_variables, session, kwargs):
        self._snapshot = VariableSnapshot(get_variables, session)
        super().__init__(**kwargs)
        self._snapshot.prepare()
        self._snapshot.save()  # restore() before the first commit gives the start values

    def save(self):
        self._snapshot.save()
        super().save()

    def _mirror_snapshot(self):
        return dict(super()._mirror_snapshot(), variables=self._snapshot.saved_arrays())

    def _load_mirror(self, snapshot):
        self._snapshot.load_arrays(snapshot["variables"])
        super()._load_mirror(snapshot)

    def restore(self):
        self._snapshot.restore()
        super().restore()

    def sync(self):
        """Every rank takes rank 0's variables and attributes; they become
        the committed state."""
        self._prepare_sync()
        mirrored = restart.take_mirror_once()  # a relaunched job resumes from it
        if mirrored is not None:
            self._load_mirror(mirrored)
        self._snapshot.sync()
        self._snapshot.save()
        super().sync()

    def _prepare_sync(self):
        pass


class TensorFlowState(_VariablesState):
    """tf.Variables and plain attributes: TensorFlowState(variables, epoch=0).

    variables: the tf.Variables to save, restore and sync; in a v1 graph,
    all global variables when left out. session: the v1 session to run in
    (default: the default session at each call); not used eagerly.
    """

    def __init__(self, variables=None, session=None, **kwargs):
        if variables is None:
            if tf.executing_eagerly():
                raise ValueError("TensorFlowState(variables=...): eager TensorFlow has no "
                                 "global variables to find; pass the variables to keep, e.g. "
                                 "model.variables + optimizer.variables")
            variables = tf.compat.v1.global_variables()
        self.variables = list(variables)
        self.session = session
        self._start(lambda: self.variables, session, kwargs)


def optimizer_variables(optimizer):
    """An optimizer's variables, whether `variables` is a list (Keras 3) or a
    method (tf_keras), and the PowerSGD state a tf_ring optimizer keeps
    besides them (tf_ring/keras/_powersgd.py)."""
    if optimizer is None:
        return []
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables) + _powersgd_state(optimizer)


def _powersgd_state(optimizer):
    for candidate in (optimizer, getattr(optimizer, "inner_optimizer", None)):
        powersgd = getattr(getattr(candidate, "_tf_ring_settings", None), "powersgd", None)
        if powersgd is not None:
            return list(powersgd.variables)
    return []


def build_optimizer(optimizer, model):
    """Creates the optimizer's slots now where the optimizer allows it (Keras 3,
    tf_keras's new optimizers), so sync() and commit() cover them from the
    first step; legacy optimizers create theirs at the first step."""
    if optimizer is None or not hasattr(optimizer, "build"):
        return
    if getattr(optimizer, "built", False) or getattr(optimizer, "_built", False):
        return
    optimizer.build(model.trainable_variables)


class TensorFlowKerasState(_VariablesState):
    """A Keras model's weights, its optimizer's variables, and plain attributes.

    optimizer: defaults to model.optimizer. backend: the Keras backend, whose
    get_session() gives the session in a v1 graph (tf_keras without eager
    execution; default: tf.compat.v1.keras.backend's).
    """

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        session = None
        if not tf.executing_eagerly():
            # tf_keras.backend has no get_session; tf.compat.v1.keras.backend does.
            get_session = (getattr(backend, "get_session", None)
                           or tf.compat.v1.keras.backend.get_session)
            session = get_session()
        self._start(self._variables, session, kwargs)

    def _variables(self):
        return list(self.model.variables) + optimizer_variables(self.optimizer)

    def _prepare_sync(self):
        build_optimizer(self.optimizer, self.model)
