"""backward_passes_per_step: sum gradients locally, reduce and apply every Nth pass."""
import tensorflow as tf


class LocalGradientAccumulator:
    """Holds per-variable gradient sums and a pass counter.

    The variables are plain tf.Variables kept off the optimizer's tracked state,
    so a saved model's optimizer looks exactly like the user's optimizer.
    """

    def __init__(self, passes):
        self.passes = passes
        self._counter = None
        self._sums = {}

    def _ensure_variables(self, grads, variables):
        with tf.init_scope():
            if self._counter is None:
                self._counter = tf.Variable(0, dtype=tf.int64, trainable=False,
                                            name="tf_ring_backward_passes")
            for grad, var in zip(grads, variables):
                if grad is not None and _key(var) not in self._sums:
                    self._sums[_key(var)] = tf.Variable(
                        tf.zeros(var.shape, dtype=grad.dtype), trainable=False,
                        name="tf_ring_gradient_sum")

    def step(self, grads, variables, reduce_and_apply, count_skipped_pass):
        """On the last pass of a group calls reduce_and_apply(summed_grads);
        otherwise adds grads to the sums and calls count_skipped_pass().

        Every rank's counter holds the same value, so all ranks take the same
        branch and the collectives inside it line up. Inside a tf.function the
        stateful ops run in program order (automatic control dependencies).
        """
        self._ensure_variables(grads, variables)
        sums = [None if g is None else self._sums[_key(v)] for g, v in zip(grads, variables)]

        def last_pass():
            reduce_and_apply([None if g is None else s + g for g, s in zip(grads, sums)])
            for s in sums:
                if s is not None:
                    s.assign(tf.zeros_like(s))
            self._counter.assign(0)
            return tf.constant(True)

        def earlier_pass():
            for g, s in zip(grads, sums):
                if g is not None:
                    s.assign_add(g)
            self._counter.assign_add(1)
            count_skipped_pass()
            return tf.constant(False)

        return tf.cond(tf.equal(self._counter, self.passes - 1), last_pass, earlier_pass)


def _key(var):
    return id(var)
