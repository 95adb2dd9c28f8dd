"""DistributedGradientTape's backward_passes_per_step: gradients summed on
this rank over N calls to gradient(), reduced over ranks on the Nth.

A training loop makes a new tape, and a new DistributedGradientTape around
it, at every step, so the sums cannot live in the wrapper: they live here,
in one accumulator per (tape name, list of sources), found again by every
wrapper built with that name over the same variables. Inside a tf.function
the wrapper is built when the function is traced, and the accumulator's
variables are made outside the function (init_scope), as optimizers make
their slots.

The pass counter holds the same value on every rank (every rank makes the
same calls), so all ranks take the same branch and the reduction's
collectives line up. Gradients are summed densely: a tf.IndexedSlices
gradient (an Embedding's) is added into a sum of its variable's shape and
reduced dense.
"""
import weakref

import tensorflow as tf

_ACCUMULATORS = {}  # (name, source ids) -> PassAccumulator


def accumulator_for(name, sources):
    """The accumulator of `name` over these sources (made on first use)."""
    key = (name, tuple(id(s) for s in sources))
    found = _ACCUMULATORS.get(key)
    if found is not None and found.holds(sources):
        return found
    made = PassAccumulator(sources)
    _ACCUMULATORS[key] = made
    # A variable's id may be reused once it is gone: drop the entry with it.
    weakref.finalize(sources[0], _ACCUMULATORS.pop, key, None)
    return made


class PassAccumulator:
    """Per-source gradient sums and the number of passes summed so far."""

    def __init__(self, sources):
        self._sources = [weakref.ref(s) for s in sources]
        self._counter = None
        self._sums = [None] * len(sources)

    def holds(self, sources):
        return len(sources) == len(self._sources) and all(
            ref() is s for ref, s in zip(self._sources, sources))

    def _make_variables(self, grads, sources):
        with tf.init_scope():
            if self._counter is None:
                self._counter = tf.Variable(0, dtype=tf.int64, trainable=False,
                                            name="tf_ring_tape_backward_passes")
            for i, (grad, source) in enumerate(zip(grads, sources)):
                if grad is not None and self._sums[i] is None:
                    self._sums[i] = tf.Variable(tf.zeros(source.shape, dtype=grad.dtype),
                                                trainable=False, name="tf_ring_tape_gradient_sum")

    def add_pass(self, grads, sources, passes, reduce_sums):
        """Adds this pass's `grads`, then on the `passes`th pass returns
        (reduce_sums(sums), True) and clears the sums; on the others
        (zeros shaped like the sums, False). Sources that never had a
        gradient give None either way."""
        self._make_variables(grads, sources)
        for grad, total in zip(grads, self._sums):
            if grad is not None:
                total.assign_add(tf.convert_to_tensor(grad))
        self._counter.assign_add(1)
        held = [i for i, total in enumerate(self._sums) if total is not None]

        def last_pass():
            reduced = reduce_sums([self._sums[i].read_value() for i in held],
                                  [sources[i] for i in held])
            with tf.control_dependencies([r for r in reduced if r is not None]):
                for i in held:
                    self._sums[i].assign(tf.zeros_like(self._sums[i]))
                self._counter.assign(0)
                return [tf.identity(r) for r in reduced], tf.constant(True)

        def earlier_pass():
            return [tf.zeros_like(self._sums[i]) for i in held], tf.constant(False)

        outs, done = tf.cond(self._counter >= passes, last_pass, earlier_pass)
        results = [None] * len(grads)
        for i, out in zip(held, outs):
            results[i] = out
        return results, done
