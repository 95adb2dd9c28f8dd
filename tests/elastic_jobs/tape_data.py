"""The data and the uninterrupted reference for tape_job.py: a linear
regression whose every step uses a global batch of G samples, split evenly
over 2 or 3 ranks, so the averaged gradient and the weights do not depend on
the world's size (up to rounding)."""
import numpy as np

N, G, EPOCHS, LR = 60, 6, 2, 0.05  # G divides by 2 and 3; N by G
STEPS = EPOCHS * N // G


def samples():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N, 4)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]]) + 0.1 * rng.normal(size=(N, 1))).astype(np.float32)
    return x, y


def epoch_dataset(epoch):
    """The epoch's order: the same on every rank and in every world."""
    import tensorflow as tf
    x, y = samples()
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(
        N, seed=100 + epoch, reshuffle_each_iteration=False)


def reference_weights():
    """What an uninterrupted run ends with, computed in NumPy (float64)
    from the epochs' sample order."""
    x, y = samples()
    w = np.zeros((4, 1))
    for epoch in range(EPOCHS):
        order = np.array([i for i, _ in enumerate_order(epoch)])
        for s in range(N // G):
            idx = order[s * G:(s + 1) * G]
            xb, yb = x[idx].astype(np.float64), y[idx].astype(np.float64)
            w -= LR * 2.0 / G * xb.T @ (xb @ w - yb)
    return w.ravel()


def enumerate_order(epoch):
    """(index, sample) in the epoch's order, the index found by matching x."""
    x, _ = samples()
    rows = {x[i].tobytes(): i for i in range(N)}
    return [(rows[xs.tobytes()], xs) for xs, _ in epoch_dataset(epoch).as_numpy_iterator()]
