"""In-memory copies of variables: save(), restore(), and sync() from rank 0.

Eagerly, save() copies each variable into a NumPy array allocated once
(host memory, also for GPU variables, which keeps GPU memory free). It is
the fastest of the ways benchmarks/elastic_commit.py measures: TensorFlow's
own copy kernels (into shadow variables) were several times slower on CPU,
and tf.identity / assign snapshots only share the buffer, so the optimizer's
next step pays the copy (copy on write). In v1 graphs the values are read
into NumPy through the session and written back through placeholders.
"""
import numpy as np
import tensorflow as tf

from tf_ring.collectives.ops import broadcast

SYNC_NAME = "elastic.sync"


def tf_variable(var):
    """The tf.Variable behind `var` (a Keras 3 variable wraps one)."""
    if isinstance(var, tf.Variable):
        return var
    inner = getattr(var, "value", None)
    if isinstance(inner, tf.Variable):
        return inner
    raise TypeError("elastic state: expected TensorFlow or Keras variables, got %s"
                    % type(var).__name__)


def _broadcast_all(variables):
    """Assign ops (or eager assignments) giving every variable rank 0's value;
    named by position, which every rank builds in the same order."""
    return [var.assign(broadcast(tf.convert_to_tensor(var), 0, name="%s.%d" % (SYNC_NAME, index)))
            for index, var in enumerate(variables)]


class _EagerCopies:
    """Host copies of one list of variables, in NumPy arrays allocated once."""

    def __init__(self, variables):
        self.variables = variables
        self._arrays = [np.empty(var.shape, var.dtype.as_numpy_dtype) for var in variables]

        @tf.function(autograph=False)
        def sync():
            _broadcast_all(variables)
        self._sync = sync

    def save(self):
        for var, array in zip(self.variables, self._arrays):
            # A CPU tensor is viewed, not copied: one memcpy per variable.
            np.copyto(array, np.asarray(var.read_value()))

    def restore(self):
        for var, array in zip(self.variables, self._arrays):
            # A fresh array: TensorFlow 2.21 copies it into the variable anyway,
            # but a version that adopted its memory would otherwise let the
            # variable's next in-place update write into the saved copy.
            var.assign(np.array(array))

    def sync(self):
        if self.variables:
            self._sync()

    def arrays(self):
        return [array.copy() for array in self._arrays]  # the next save reuses _arrays

    def load(self, arrays):
        for array, value in zip(self._arrays, arrays):
            np.copyto(array, value)
        self.restore()


class _GraphCopies:
    """The same for a v1 graph: NumPy copies through `session`."""

    def __init__(self, variables, session_fn):
        self.variables = variables
        self._session_fn = session_fn
        self._values = None
        if not variables:
            return
        with variables[0].graph.as_default():
            self._placeholders = [tf.compat.v1.placeholder(var.dtype.base_dtype, var.shape)
                                  for var in variables]
            self._restore_op = tf.group(*[var.assign(value) for var, value
                                          in zip(variables, self._placeholders)])
            self._sync_op = tf.group(*_broadcast_all(variables))
            self._initialized = [tf.compat.v1.is_variable_initialized(var) for var in variables]

    def _initialize_missing(self, session):
        """Initializes variables nothing has initialized yet (a tf_keras
        optimizer's before its first step), as Keras would at their first use."""
        missing = [var.initializer for var, done
                   in zip(self.variables, session.run(self._initialized)) if not done]
        if missing:
            session.run(missing)

    def save(self):
        if self.variables:
            session = self._session_fn()
            self._initialize_missing(session)
            self._values = session.run(self.variables)

    def restore(self):
        if self.variables and self._values is not None:
            self._session_fn().run(self._restore_op,
                                   feed_dict=dict(zip(self._placeholders, self._values)))

    def arrays(self):
        return list(self._values or [])  # session.run returns fresh arrays at each save

    def load(self, arrays):
        self._values = list(arrays)
        self.restore()

    def sync(self):
        if self.variables:
            session = self._session_fn()
            self._initialize_missing(session)
            session.run(self._sync_op)


class VariableSnapshot:
    """save(), restore() and sync() for the variables `get_variables()`
    returns. The list may grow (optimizer slots created at the first step):
    save() then makes copies for the new list; restore() puts back what the
    last save() copied."""

    def __init__(self, get_variables, session=None):
        self._get_variables = get_variables
        self._session = session
        self._eager = tf.executing_eagerly()
        self._copies = None
        self._saved = None

    def _session_fn(self):
        session = self._session or tf.compat.v1.get_default_session()
        if session is None:
            raise RuntimeError(
                "tf_ring elastic state in a v1 graph needs a session: pass session= to the "
                "state, or use it inside `with session.as_default():`")
        return session

    def _current(self):
        variables = [tf_variable(var) for var in self._get_variables()]
        copies = self._copies
        if (copies is None or len(copies.variables) != len(variables)
                or any(a is not b for a, b in zip(copies.variables, variables))):
            copies = (_EagerCopies(variables) if self._eager
                      else _GraphCopies(variables, self._session_fn))
            self._copies = copies
        return copies

    def prepare(self):
        """Builds the copies now (v1: before the graph is finalized)."""
        self._current()

    def save(self):
        copies = self._current()
        copies.save()
        self._saved = copies

    def restore(self):
        if self._saved is not None:
            self._saved.restore()

    def sync(self):
        self._current().sync()

    def saved_arrays(self):
        """The last save as NumPy arrays of its own (for the restart mirror)."""
        return self._saved.arrays() if self._saved is not None else []

    def load_arrays(self, arrays):
        """Makes `arrays` the saved values and the variables' values."""
        copies = self._current()
        if len(arrays) != len(copies.variables):
            raise ValueError("elastic restart: the mirrored commit has %d variables, this state "
                             "%d; the training script must build the same state after a restart"
                             % (len(arrays), len(copies.variables)))
        copies.load(arrays)
        self._saved = copies
