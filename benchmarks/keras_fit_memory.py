"""What a small Keras fit costs in memory and time with the allocator it runs
under: the peak resident memory of each rank (VmHWM) and the median step.

Model: keras_fit.py's MLP (8 Dense layers 1024 wide: 8.4 M parameters,
seven 4 MiB kernels among its gradients), plain SGD through tf_ring's
DistributedOptimizer, 16 samples per rank per step. Run it once as is and
once with TensorFlow's BFC allocator for CPU memory:

    tfringrun -np 2 python benchmarks/keras_fit_memory.py
    TF_CPU_ALLOCATOR_USE_BFC=true tfringrun -np 2 python benchmarks/keras_fit_memory.py

Rank 0 prints `FIT_MEMORY {json}`: the peak RSS (MB) of the worst rank, the
peak's growth over the RSS before fit(), the median step (ms), whether the
CPU allocator is BFC, and the engine's counters (warm_outputs, in_place_tensors).
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from keras_fit import build_mlp, synthetic_batch  # noqa: E402


def status_mb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    raise KeyError(field)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()

    import tensorflow as tf
    import keras
    import tf_ring
    import tf_ring.keras as hvd

    hvd.init()
    try:
        tf.config.experimental.get_memory_info("CPU:0")
        bfc = True
    except ValueError:  # the default allocator keeps no statistics
        bfc = False
    model = build_mlp(keras)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    data = tf.data.Dataset.from_tensors(synthetic_batch(args.batch_size, hvd.rank())).repeat()
    marks = []

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            marks.append(time.perf_counter())

    before_mb = status_mb("VmRSS")
    tf_ring.reset_stats()
    model.fit(data, epochs=1, verbose=0, steps_per_epoch=args.steps, callbacks=[Clock()])
    steps = np.diff(marks[10:])  # after warm-up and tracing
    mine = {"peak_mb": status_mb("VmHWM"), "growth_mb": status_mb("VmHWM") - before_mb,
            "step_ms": float(np.median(steps)) * 1e3}
    everyone = hvd.allgather_object(mine)
    stats = tf_ring.stats()
    if hvd.rank() == 0:
        print("FIT_MEMORY " + json.dumps({
            "bfc": bfc, "env": os.environ.get("TF_CPU_ALLOCATOR_USE_BFC"),
            "peak_mb": max(r["peak_mb"] for r in everyone),
            "growth_mb": max(r["growth_mb"] for r in everyone),
            "step_ms": max(r["step_ms"] for r in everyone),
            "warm_outputs": stats.get("warm_outputs"), "in_place_tensors": stats.get("in_place_tensors"),
            "tensors": stats["tensors"]}), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
