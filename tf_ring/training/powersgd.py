"""PowerSGD: low-rank gradient compression with error feedback (Vogels,
Karimireddy and Jaggi, NeurIPS 2019), for links too slow for full gradients.

Each compressed gradient G, seen as an n x m matrix, is replaced on the wire
by two thin ones, P (n x r) and Q (m x r), with r the rank:

    M = G + E       E: what earlier steps' approximations missed (error feedback)
    P = M Q         Q: last step's (warm start), or seeded random numbers
    P = average of P over the ranks, orthogonalized (Gram-Schmidt)
    Q = Mᵀ P
    Q = average of Q over the ranks
    G' = P Qᵀ       the reduced gradient: the same on every rank
    E = M - P Qᵀ    this rank's own: M is this rank's

All P's of a step travel in one grouped allreduce, together with the
gradients left uncompressed (vectors such as biases, matrices too small to
pay), so the engine fuses them; all Q's in a second one. Q and the step
counter are the same on every rank (seeded at creation, then built from
averages); E is each rank's own, as the algorithm defines it.

Shapes: TensorFlow and Keras put the output channels last (Dense (in, out),
Conv2D (h, w, in, out)), so a kernel of rank k > 2 is seen as
(product of its first k - 1 dimensions) x (its last). Rank-1 and rank-0
tensors are never compressed.

This module holds the settings (PowerSGD, what Compression.powersgd returns)
and the algorithm (PowerSGDState.reduce). The collectives are handed in by
the caller, the gradient reducer; a test hands in a fake one.
"""
import functools
import numbers
import re
import warnings

import tensorflow as tf

from tf_ring.collectives._op_common import Average, Sum
from tf_ring.runtime.process_set import runtime_size
from tf_ring.training.powersgd_math import compute_dtype, orthogonalize


def _check_int(name, value, minimum, fix):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError("Compression.powersgd: %s must be an integer, got %r (%s)"
                        % (name, value, type(value).__name__))
    if value < minimum:
        raise ValueError("Compression.powersgd: %s must be >= %d, got %d; %s"
                         % (name, minimum, value, fix))
    return int(value)


def _check_real(name, value, fix):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError("Compression.powersgd: %s must be a number, got %r (%s)"
                        % (name, value, type(value).__name__))
    if not value >= 0:  # also refuses NaN
        raise ValueError("Compression.powersgd: %s must be >= 0, got %r; %s" % (name, value, fix))
    return float(value)


def _check_bool(name, value):
    if not isinstance(value, bool):
        raise TypeError("Compression.powersgd: %s must be True or False, got %r" % (name, value))
    return value


class PowerSGD(tf.Module):
    """Settings of PowerSGD compression; Compression.powersgd(...) returns one.

    The names are those of PyTorch's PowerSGD hook (PowerSGDState), so its
    users find what they know:

    rank: r, the rank of the approximation (PyTorch: matrix_approximation_rank,
      accepted as that name too). Higher sends more and approximates better.
    start_powerSGD_iter: reductions sent uncompressed before compression
      starts (a warm-up; PyTorch's default, 1000). By default the first 1000
      steps are NOT compressed: a short run may never compress at all; pass
      0 to compress from the first step. Counted per reduction, so with
      backward_passes_per_step=k a reduction is k passes. Rank 0 logs (INFO,
      tf_ring's logger) the warm-up when the reduction is first built, and,
      eagerly, the step where compression starts.
    min_compression_rate: a matrix is compressed only when its size divided
      by the size of its factors, n*m / ((n + m) * r), is at least this; the
      others go uncompressed with the vectors. Below 1 compresses matrices
      that compression makes bigger (for tests).
    use_error_feedback: keep what the approximation missed (E) and add it to
      the next step's gradient. Without it PowerSGD loses accuracy.
    warm_start: start each step's power iteration from the last step's Q;
      otherwise from fresh seeded random numbers each step.
    orthogonalization_epsilon: added to each column's norm in Gram-Schmidt
      (PyTorch's; 0 by default). A zero column stays zero in any case.
    random_seed: seeds the initial Q (identical on every rank, no broadcast).

    The object also keeps the state of the variables whose gradients it
    compresses through a DistributedGradientTape or a v1 DistributedOptimizer
    (a DistributedOptimizer from tf_ring.keras keeps its own, as optimizer
    variables). Create it once, outside the training step, and checkpoint it
    like any tf.Module (tf.train.Checkpoint(..., powersgd=compression)).
    """

    def __init__(self, rank=1, start_powerSGD_iter=1000, min_compression_rate=2.0,  # noqa: N803
                 use_error_feedback=True, warm_start=True, orthogonalization_epsilon=0.0,
                 random_seed=0, matrix_approximation_rank=None):
        super().__init__(name="powersgd")
        if matrix_approximation_rank is not None:
            if rank not in (1, matrix_approximation_rank):
                raise ValueError("Compression.powersgd: rank=%r and matrix_approximation_rank=%r "
                                 "name the same setting; give one of them" %
                                 (rank, matrix_approximation_rank))
            rank = matrix_approximation_rank
        self.rank = _check_int("rank", rank, 1, "the rank of the approximation is at least 1 "
                               "(1 to 4 is usual)")
        self.start_powerSGD_iter = _check_int(
            "start_powerSGD_iter", start_powerSGD_iter, 0,
            "it counts the reductions sent uncompressed first (0: compress from the start)")
        self.min_compression_rate = _check_real(
            "min_compression_rate", min_compression_rate,
            "it is the least n*m / ((n + m) * rank) for which a matrix is compressed")
        self.use_error_feedback = _check_bool("use_error_feedback", use_error_feedback)
        self.warm_start = _check_bool("warm_start", warm_start)
        self.orthogonalization_epsilon = _check_real(
            "orthogonalization_epsilon", orthogonalization_epsilon,
            "it is added to column norms (0 or a small number such as 1e-8)")
        self.random_seed = _check_int("random_seed", random_seed, 0, "seeds are >= 0")
        # Tracked: tf.train.Checkpoint and tf.Module.variables see the state.
        self._made = []
        self._state = None
        self._clock = None

    def settings(self):
        """The settings as keyword arguments of Compression.powersgd."""
        return dict(rank=self.rank, start_powerSGD_iter=self.start_powerSGD_iter,
                    min_compression_rate=self.min_compression_rate,
                    use_error_feedback=self.use_error_feedback, warm_start=self.warm_start,
                    orthogonalization_epsilon=self.orthogonalization_epsilon,
                    random_seed=self.random_seed)

    def copy(self, clock=None):
        """A PowerSGD with these settings and a state of its own (an optimizer
        keeps one). clock() gives the reductions done so far as an int64
        tensor (an optimizer's iterations survive model.save); without it the
        state counts them in a variable of its own."""
        twin = PowerSGD(**self.settings())
        twin._clock = clock
        return twin

    def __repr__(self):
        return "Compression.powersgd(%s)" % ", ".join(
            "%s=%r" % item for item in self.settings().items())

    # Reached only when PowerSGD is given to a collective that compresses one
    # tensor at a time: PowerSGD needs a variable's state and two collectives.
    def compress(self, tensor):
        raise TypeError(
            "Compression.powersgd compresses gradients of variables and keeps state for each "
            "(Q, residual): pass it as compression= to DistributedOptimizer or "
            "DistributedGradientTape. allreduce, grouped_allreduce and reducescatter take "
            "Compression.none, Compression.fp16 or Compression.bf16.")

    decompress = compress

    def reduce_gradients(self, grads, variables, wire):
        """The gradient reducer's seam for a compressor with state: `grads`
        (dense or None, one per variable of `variables`) reduced over the
        ranks with this object's state, as wire's allreduce would reduce
        them. wire: op, prescale_factor, postscale_factor, process_set and
        allreduce(tensors, label), one grouped allreduce with those."""
        check_op(wire.op, "gradient reduction")
        scale = wire.prescale_factor * wire.postscale_factor
        if wire.op == Sum:
            scale = runtime_size(wire.process_set, tf.float32) * scale

        def allreduce(tensors, stage):
            return wire.allreduce(tensors, "powersgd." + stage)

        def average(tensors, stage):
            # The wire applies its op and scales; Q needs the plain average.
            out = wire.allreduce(tensors, "powersgd." + stage)
            return out if _is_one(scale) else [t / tf.cast(scale, t.dtype) for t in out]

        return self.state.reduce(grads, variables, allreduce, average, scale)

    def matrix_shape(self, shape):
        """(n, m) of a tensor of `shape` seen as a matrix, or None for rank < 2."""
        shape = [int(d) for d in shape]
        if len(shape) < 2:
            return None
        n = 1
        for d in shape[:-1]:
            n *= d
        return n, shape[-1]

    def compresses(self, shape, label):
        """Whether a gradient of `shape` (a variable named `label`) is compressed."""
        matrix = self.matrix_shape(shape)
        if matrix is None:
            return False
        n, m = matrix
        if n * m < self.min_compression_rate * (n + m) * self.rank:
            return False
        if self.rank > min(n, m):
            # Only reached with min_compression_rate < 1: with >= 1 such a matrix never pays.
            raise ValueError(
                "Compression.powersgd: rank %d is larger than the smaller side (%d) of the "
                "gradient of %s, seen as a %d x %d matrix (shape %s). Use rank <= %d, or "
                "min_compression_rate >= 1 to leave matrices that small uncompressed."
                % (self.rank, min(n, m), label, n, m, list(shape), min(n, m)))
        return True

    @property
    def state(self):
        """This object's PowerSGDState (tapes and v1 optimizers use the one of
        the object they were given; a tf_ring.keras optimizer, its copy's)."""
        if self._state is None:
            self._state = PowerSGDState(self, self._make_tracked_variable, self._clock)
        return self._state

    def build(self, variables):
        """Creates the tape's state for `variables` now (it is otherwise made at
        the first reduction): before a checkpoint is restored into it, or to
        keep variable creation out of a tf.function traced more than once."""
        self.state.build(list(variables))

    def _make_tracked_variable(self, name, shape, dtype, initializer):
        with tf.init_scope():  # lifted out of a tf.function being traced
            var = tf.Variable(initializer(shape, dtype), trainable=False, name=name, dtype=dtype)
        self._made.append(var)
        return var


def powersgd_of(compression, what, op=Average):
    """The PowerSGD object when `compression` is one, else None; a clear error
    for PowerSGD's class given uncalled, or an op PowerSGD cannot give."""
    if compression is PowerSGD:
        raise TypeError("%s: compression=Compression.powersgd must be called with its settings, "
                        "e.g. compression=tf_ring.Compression.powersgd(rank=2)" % what)
    if not isinstance(compression, PowerSGD):
        return None
    check_op(op, what)
    return compression


def check_op(op, what):
    """PowerSGD averages its factors; the result can then be an average or a sum."""
    if op not in (Average, Sum):
        raise ValueError("%s: Compression.powersgd works with op=tf_ring.Average or tf_ring.Sum "
                         "(it averages low-rank factors); got op=%r. Use Average, or "
                         "compression=Compression.none with this op." % (what, op))


def variable_label(var):
    return getattr(var, "path", None) or getattr(var, "name", None) or "variable"


def _slot_name(prefix, var):
    return prefix + re.sub(r"[^A-Za-z0-9_.-]+", "_", variable_label(var).split(":")[0])


class _Slots:
    """One compressed variable's state."""

    def __init__(self, index, n, m, dtype, q, residual):
        self.index, self.n, self.m, self.dtype = index, n, m, dtype
        self.q, self.residual = q, residual


def _keep(slots, m, approx, q, warm_start):
    """Stores a step's residual (when kept) and Q (for a warm start). The
    result depends on the assignments: a cond branch in a v1 graph gets no
    automatic control dependencies."""
    updates = []
    if slots.residual is not None:
        updates.append(slots.residual.assign(m - approx))
    if warm_start:
        updates.append(slots.q.assign(q))
    with tf.control_dependencies(updates):
        return tf.constant(True)


def _after(updates, tensors):
    """`tensors`, computed only once `updates` ran: a v1 graph runs only what
    its fetches depend on (tf.function and eager run every update anyway)."""
    with tf.control_dependencies(updates):
        return [None if t is None else tf.identity(t) for t in tensors]


def _is_one(scale):
    return isinstance(scale, (int, float)) and scale == 1.0


class PowerSGDState:
    """Q, residual and step counter of the gradients one reducer compresses.

    make_variable(name, shape, dtype, initializer) creates a state variable
    whose value is initializer(shape, dtype): a tf.Variable (PowerSGD keeps
    them for tapes), or an optimizer's variable (tf_ring.keras). Variables
    are created on the first reduction (or build()), in the order of the
    gradients, which is the same on every rank.
    """

    def __init__(self, settings, make_variable, clock=None):
        self.settings = settings
        self._make = make_variable
        self._clock = clock
        self._slots = {}  # id(variable) -> _Slots, or None when left uncompressed
        self._count = 0
        self._warned = False
        self.step = None  # the reductions done, when there is no clock

    def variables(self):
        """Every state variable made so far: the step counter, then Q and residual of each."""
        made = [] if self.step is None else [self.step]
        for slots in self._slots.values():
            if slots is not None:
                made += [v for v in (slots.q, slots.residual) if v is not None]
        return made

    def memory_bytes(self):
        """Bytes held by the state (Q factors and residuals)."""
        total = 0
        for slots in self._slots.values():
            if slots is not None:
                width = tf.as_dtype(slots.dtype).size
                if slots.q is not None:
                    total += slots.m * self.settings.rank * width
                if slots.residual is not None:
                    total += slots.n * slots.m * width
        return total

    def build(self, variables):
        """Creates the state of every variable of `variables` not seen yet."""
        if self.step is None and self._clock is None:
            self.step = self._make("powersgd_step", [], tf.int64, tf.zeros)
        new = [v for v in variables if id(v) not in self._slots]
        for var in new:
            self._slots[id(var)] = self._make_slots(var)
        if new:
            self._check_something_compressed(variables)

    def _make_slots(self, var):
        s = self.settings
        dtype = tf.as_dtype(var.dtype)
        if not dtype.is_floating or not s.compresses(var.shape, variable_label(var)):
            return None
        n, m = s.matrix_shape(var.shape)
        dtype = compute_dtype(dtype)
        index = self._count
        self._count += 1
        q = residual = None
        if s.warm_start:
            seed = [s.random_seed, index]
            q = self._make(_slot_name("powersgd_q/", var), [m, s.rank], dtype,
                           lambda shape, dt: tf.random.stateless_normal(shape, seed, dtype=dt))
        if s.use_error_feedback:
            residual = self._make(_slot_name("powersgd_residual/", var), [n, m], dtype,
                                  tf.zeros)
        return _Slots(index, n, m, dtype, q, residual)

    def _check_something_compressed(self, variables):
        """A rank too large for every matrix is a mistake; so many small matrices
        that none pays is worth a warning."""
        if any(self._slots.get(id(v)) is not None for v in variables):
            return
        matrices = [(v, self.settings.matrix_shape(v.shape)) for v in variables
                    if self.settings.matrix_shape(v.shape) is not None]
        if not matrices:
            return
        var, (n, m) = max(matrices, key=lambda vm: min(vm[1]))
        if self.settings.rank > min(n, m):
            raise ValueError(
                "Compression.powersgd: rank %d is larger than the smaller side of every matrix "
                "gradient; the largest, %s, is %d x %d (shape %s). Use rank <= %d."
                % (self.settings.rank, variable_label(var), n, m, list(var.shape), min(n, m)))
        if not self._warned:
            self._warned = True
            warnings.warn("Compression.powersgd: no gradient is large enough to compress at "
                          "rank %d and min_compression_rate %g; all are sent uncompressed."
                          % (self.settings.rank, self.settings.min_compression_rate))

    def reduce(self, grads, variables, allreduce, average, scale=1.0):
        """Returns `grads` reduced over the ranks, compressed where it pays.

        grads: dense tensors or None (passed through), one per variable of
        `variables`. allreduce(tensors, stage) reduces a list the way the
        caller reduces uncompressed gradients (its op and scale factors) in
        one grouped collective; average(tensors, stage) averages a list.
        scale: what turns the average into the caller's result (the number
        of ranks for op=Sum, with its scale factors), applied to the
        compressed gradients. Works eagerly, in tf.function and under XLA.
        """
        grads = list(grads)
        variables = list(variables)
        if len(grads) != len(variables):
            raise ValueError("PowerSGD: %d gradients for %d variables; give one gradient (or "
                             "None) per variable" % (len(grads), len(variables)))
        self.build(variables)
        present = [i for i, g in enumerate(grads) if g is not None]
        results = list(grads)
        if not present:
            return results

        def uncompressed():
            with tf.name_scope("powersgd_warmup"):
                return allreduce([grads[i] for i in present], "warmup")

        done = self.steps_done()

        def compressed():
            with tf.name_scope("powersgd"):
                return self._compressed([grads[i] for i in present],
                                        [variables[i] for i in present], allreduce, average,
                                        scale, done)

        start = self.settings.start_powerSGD_iter
        self._log_warmup_once(start)
        if start == 0:
            reduced = compressed()
        elif tf.executing_eagerly():
            steps = int(done.numpy())
            if steps == start:
                _log_on_rank_0("PowerSGD: compression starts at reduction %d, after %d "
                               "uncompressed ones (start_powerSGD_iter)", steps + 1, start)
            reduced = uncompressed() if steps < start else compressed()
        else:
            # The counter is the same on every rank, so every rank takes the same branch.
            reduced = tf.cond(done < start, uncompressed, compressed)
        if self.step is not None:
            with tf.control_dependencies([done]):  # a v1 graph would not order them
                reduced = _after([self.step.assign_add(1)], reduced)
        for i, out in zip(present, reduced):
            results[i] = out
        return results

    def _log_warmup_once(self, start):
        if start and not getattr(self, "_warmup_logged", False):
            self._warmup_logged = True
            _log_on_rank_0("PowerSGD: the first %d reductions are sent uncompressed "
                           "(start_powerSGD_iter=%d, the default being 1000); compression "
                           "starts after them. Pass start_powerSGD_iter=0 to compress from "
                           "the start.", start, start)

    def steps_done(self):
        """Reductions done before this one, an int64 tensor."""
        if self._clock is not None:
            return tf.cast(self._clock(), tf.int64)
        return tf.convert_to_tensor(self.step)

    def _compressed(self, grads, variables, allreduce, average, scale, done):
        s = self.settings
        plain, packed = [], []
        for i, var in enumerate(variables):
            (packed if self._slots[id(var)] is not None else plain).append(i)
        matrices, ps = [], []
        for i in packed:
            slots = self._slots[id(variables[i])]
            m = tf.reshape(tf.cast(grads[i], slots.dtype), [slots.n, slots.m])
            if slots.residual is not None:
                m = m + slots.residual
            matrices.append(m)
            ps.append(tf.matmul(m, self._start_q(slots, done)))
        first = allreduce([grads[i] for i in plain] + ps, "p")
        results = [None] * len(grads)
        for i, out in zip(plain, first):
            results[i] = out
        if not packed:
            return results
        ps = [orthogonalize(p, s.orthogonalization_epsilon) for p in first[len(plain):]]
        qs = average([tf.matmul(m, p, transpose_a=True) for m, p in zip(matrices, ps)], "q")
        kept = []
        for i, m, p, q in zip(packed, matrices, ps, qs):
            slots = self._slots[id(variables[i])]
            approx = tf.matmul(p, q, transpose_b=True)
            # A non-finite gradient on any rank reaches every rank's Q through the
            # averages: every rank then keeps its state (a loss-scale optimizer skips
            # the step) instead of carrying NaN into every later step.
            # (A tf.cond, not tf.where: a select would read and write the whole
            # residual once more each step.)
            finite = tf.reduce_all(tf.math.is_finite(q))
            kept.append(tf.cond(finite, functools.partial(_keep, slots, m, approx, q,
                                                          s.warm_start),
                                lambda: tf.constant(False)))
            out = approx if _is_one(scale) else approx * tf.cast(scale, slots.dtype)
            results[i] = tf.cast(tf.reshape(out, tf.shape(grads[i])), grads[i].dtype)
        return _after(kept, results)

    def _start_q(self, slots, done):
        if self.settings.warm_start:
            return tf.convert_to_tensor(slots.q)
        seed = tf.random.experimental.stateless_fold_in(
            tf.constant([self.settings.random_seed, slots.index], tf.int64), done)
        return tf.random.stateless_normal([slots.m, self.settings.rank], seed=seed,
                                          dtype=slots.dtype)


def _log_on_rank_0(message, *args):
    from tf_ring.runtime import basics
    from tf_ring.runtime._logging import get_logger
    if not basics.is_initialized() or basics.rank() == 0:
        get_logger().info(message, *args)
