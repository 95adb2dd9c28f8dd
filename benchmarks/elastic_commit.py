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
broadcast). Times are the best of --repeats runs (ms); (+x) is the median
of --repeats back-to-back pairs (step after no save, step after a save).
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


def best(fn, repeats):
    """The best of `repeats` runs: on a shared machine the least disturbed one."""
    return timed(fn, repeats)[1]


def step_extra(save, step, repeats):
    """What an optimizer step right after save() costs beyond one right after
    no save: the median of back-to-back pairs, which cancels the machine's drift."""
    extra = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        plain = time.perf_counter() - start
        kept = save()
        start = time.perf_counter()
        step()
        extra.append(time.perf_counter() - start - plain)
        del kept
    return float(np.median(extra))


def step_time(step, repeats):
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        samples.append(time.perf_counter() - start)
    return min(samples)


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
    plain_step = step_time(step, repeats)
    row = [name, "%.1fM" % (weights / 1e6), "%.0f" % megabytes, ms(best(model.get_weights, repeats))]
    for _, save in ways:
        row.append("%s (+%s)" % (ms(best(save, repeats)),
                                 ms(step_extra(save, step, repeats))))
    row.append(ms(best(state.commit, repeats)))
    shadow_save()
    row += [ms(best(snapshot.restore, repeats)), ms(best(shadow_restore, repeats)), ms(plain_step)]
    return row


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    hvd.init()
    rows = [measure(name, features, widths, args.repeats) for name, features, widths in MODELS]
    print_table("elastic commit, best ms of %d on %d rank(s); (+x) = extra ms of the optimizer "
                "step that follows" % (args.repeats, hvd.size()),
                ["model", "weights", "MB w+Adam", "get_weights (w only)", "numpy kept",
                 "numpy new", "tf shadow", "identity", "KerasState.commit()",
                 "restore numpy kept", "restore tf shadow", "Adam step"], rows)


if __name__ == "__main__":
    main()
