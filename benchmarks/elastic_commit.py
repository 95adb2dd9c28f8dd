"""What an elastic commit costs: saving a Keras model's weights and Adam
slots in memory, four ways, next to a plain model.get_weights().

    python benchmarks/elastic_commit.py            # or under tfringrun -np 2

- numpy kept: copy each variable into a NumPy array allocated once (what
  tf_ring.elastic does; see tf_ring/elastic/snapshot.py).
- numpy new: `v.numpy()` per variable, a fresh array every commit.
- tf shadow: one tf.function copying every variable into a pre-allocated
  shadow tf.Variable in place (`shadow[...].assign(v)`).
- identity: `tf.identity(v)` per variable, as Horovod's TensorFlowKerasState
  does: nearly free at commit because the tensor shares the variable's
  buffer, but the optimizer's next in-place update must then copy that
  buffer first (copy on write).

(+x) is what the optimizer step right after the save costs beyond a plain
step: the deferred part of the copy. Also restore() (numpy kept and tf
shadow) and the whole KerasState.commit() (save plus the host-update
broadcast). Times are medians of --repeats runs.
"""
import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tf_ring.keras as hvd  # noqa: E402
from bench_util import ms, print_table, timed  # noqa: E402
from tf_ring.elastic.snapshot import VariableSnapshot, tf_variable  # noqa: E402

# (name, input features, hidden layer widths): about 25M and 1M weights.
MODELS = [("mlp 2048-4096-4096-10", 2048, [4096, 4096, 10]),
          ("mlp 512-1024-512-10", 512, [1024, 512, 10])]


def build(features, widths):
    model = keras.Sequential([keras.Input((features,))]
                             + [keras.layers.Dense(w) for w in widths])
    optimizer = keras.optimizers.Adam(1e-4)
    optimizer.build(model.trainable_variables)
    grads = [tf.fill(v.shape, 1e-3) for v in model.trainable_variables]

    @tf.function
    def step():
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    step()
    return model, optimizer, step


def step_after(save, step, repeats):
    """Median time of an optimizer step that follows save()."""
    samples = []
    for _ in range(repeats):
        kept = save()
        start = time.perf_counter()
        step()
        samples.append(time.perf_counter() - start)
        del kept
    return float(np.median(samples))


def measure(name, features, widths, repeats):
    model, optimizer, step = build(features, widths)
    variables = [tf_variable(v) for v in list(model.variables) + list(optimizer.variables)]
    weights = sum(int(np.prod(v.shape)) for v in model.variables)
    megabytes = sum(v.shape.num_elements() * v.dtype.size for v in variables) / 2**20
    snapshot = VariableSnapshot(lambda: variables)
    snapshot.save()
    state = hvd.elastic.KerasState(model, optimizer)
    shadows = [tf.Variable(tf.zeros(v.shape, v.dtype)) for v in variables]

    @tf.function(autograph=False)
    def shadow_save():
        for shadow, v in zip(shadows, variables):
            shadow[...].assign(v.read_value())

    @tf.function(autograph=False)
    def shadow_restore():
        for shadow, v in zip(shadows, variables):
            v[...].assign(shadow.read_value())

    ways = [("numpy kept", snapshot.save), ("numpy new", lambda: [v.numpy() for v in variables]),
            ("tf shadow", shadow_save), ("identity", lambda: [tf.identity(v) for v in variables])]
    plain_step = step_after(lambda: None, step, repeats)
    row = [name, "%.1fM" % (weights / 1e6), "%.0f" % megabytes,
           ms(timed(model.get_weights, repeats)[0])]
    for _, save in ways:
        row.append("%s (+%s)" % (ms(timed(save, repeats)[0]),
                                 ms(step_after(save, step, repeats) - plain_step)))
    shadow_save()
    row += [ms(timed(snapshot.restore, repeats)[0]), ms(timed(shadow_restore, repeats)[0]),
            ms(timed(state.commit, repeats)[0]), ms(plain_step)]
    return row


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    hvd.init()
    rows = [measure(name, features, widths, args.repeats) for name, features, widths in MODELS]
    print_table("elastic commit, median ms on %d rank(s); (+x) = extra ms of the optimizer "
                "step that follows" % hvd.size(),
                ["model", "weights", "MB w+Adam", "get_weights (w only)", "numpy kept",
                 "numpy new", "tf shadow", "identity", "restore numpy kept", "restore tf shadow",
                 "KerasState.commit()", "Adam step"], rows)


if __name__ == "__main__":
    main()
