"""tf.compat.v1 graph training: BroadcastGlobalVariablesHook plus the v1
DistributedOptimizer in a MonitoredTrainingSession. Ranks start from
different weights and train on different shares of each batch; they must end
with the weights of one process doing SGD on whole batches from rank 0's
starting point (computed here with NumPy)."""
import numpy as np
import pytest
import tensorflow as tf

import tf_ring as hvd

BATCH, FEATURES, STEPS, LR = 12, 4, 5, 0.2


def data():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(STEPS, BATCH, FEATURES)).astype(np.float32)
    y = (x @ np.arange(1, FEATURES + 1, dtype=np.float32)[:, None] + 0.5).astype(np.float32)
    return x, y


def initial_weights(rank):
    rng = np.random.default_rng(100 + rank)
    return rng.normal(size=(FEATURES, 1)).astype(np.float32), np.float32(rank)


def numpy_reference():
    w, b = initial_weights(0)
    w, b = w.astype(np.float64), float(b)
    xs, ys = data()
    for x, y in zip(xs, ys):
        err = x @ w + b - y
        w = w - LR * (2.0 / BATCH) * x.T @ err
        b = b - LR * 2.0 * err.mean()
    return w, b


def share(array):
    n = BATCH // hvd.size()
    return array[hvd.rank() * n:(hvd.rank() + 1) * n]


def build_model(optimizer):
    w0, b0 = initial_weights(hvd.rank())
    x = tf.compat.v1.placeholder(tf.float32, [None, FEATURES])
    y = tf.compat.v1.placeholder(tf.float32, [None, 1])
    w = tf.compat.v1.get_variable("w", initializer=w0)
    b = tf.compat.v1.get_variable("b", initializer=b0)
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
    global_step = tf.compat.v1.train.get_or_create_global_step()
    train_op = optimizer.minimize(loss, global_step=global_step)
    return x, y, w, b, train_op


class FinalValuesHook(tf.compat.v1.train.SessionRunHook):
    """Reads tensors once training has stopped."""

    def __init__(self, fetches):
        self.fetches, self.values = fetches, None

    def end(self, session):
        self.values = session.run(self.fetches)


def run_training(hooks, make_optimizer):
    xs, ys = data()
    with tf.Graph().as_default():
        x, y, w, b, train_op = build_model(make_optimizer())
        final = FinalValuesHook([w, b])
        hooks = hooks + [tf.compat.v1.train.StopAtStepHook(last_step=STEPS), final]
        step = 0
        with tf.compat.v1.train.MonitoredTrainingSession(hooks=hooks) as session:
            while not session.should_stop():
                session.run(train_op, feed_dict={x: share(xs[step]), y: share(ys[step])})
                step += 1
        assert step == STEPS
        return final.values


def distributed_sgd():
    return hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(LR))


def test_hook_and_v1_optimizer_train_to_single_process_weights_on_every_rank():
    w, b = run_training([hvd.BroadcastGlobalVariablesHook(0)], distributed_sgd)
    want_w, want_b = numpy_reference()
    np.testing.assert_allclose(w, want_w, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(b, want_b, rtol=1e-4, atol=1e-5)
    everyone = hvd.allgather_object((w, b), name="v1_weights")
    for other_w, other_b in everyone:
        np.testing.assert_array_equal(other_w, w)
        assert other_b == b


def test_without_the_hook_ranks_keep_their_own_start():
    # The control: same optimizer, no broadcast, so ranks end apart.
    w, b = run_training([], distributed_sgd)
    others = hvd.allgather_object(float(b), name="v1_no_hook")
    assert len(set(others)) == hvd.size()


def test_v1_compute_gradients_are_averaged_and_slots_pass_through():
    with tf.Graph().as_default():
        v = tf.compat.v1.get_variable("v", initializer=np.float32(1.0))
        loss = v * float(hvd.rank() + 1)
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.MomentumOptimizer(0.1, 0.9),
                                       device_dense="/cpu:0")
        grads_and_vars = opt.compute_gradients(loss)
        train = opt.apply_gradients(grads_and_vars)
        assert opt.get_slot_names() == ["momentum"]
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            grad = session.run(grads_and_vars[0][0])
            session.run(train)
            assert opt.get_slot(v, "momentum") is not None
    assert grad == pytest.approx(np.mean(np.arange(1, hvd.size() + 1)))
