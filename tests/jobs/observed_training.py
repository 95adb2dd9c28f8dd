"""A small training loop for the launcher's timeline and autotune flags:
runs until autotune has settled on every rank (or --forever), then prints
the engine parameters each rank ended with."""
import argparse

import tensorflow as tf

import tf_ring as hvd

parser = argparse.ArgumentParser()
parser.add_argument("--forever", action="store_true", help="loop until killed")
args = parser.parse_args()

hvd.init()
grads = [tf.ones([500 * (i + 1)]) for i in range(6)]


@tf.function
def step():
    return hvd.grouped_allreduce(grads, name="grads")


steps = 0
while True:
    step()
    steps += 1
    if args.forever:
        if steps == 20 and hvd.rank() == 0:
            print("running", flush=True)
        continue
    settled = 1 if hvd.engine_params()["autotune"] == "settled" else 0
    if int(hvd.allreduce(tf.constant(settled), op=hvd.Min, name="done")) == 1 or steps > 5000:
        break
params = hvd.engine_params()
print("rank %d: %s %d %.3f %d" % (hvd.rank(), params["autotune"], params["fusion_threshold"],
                                  params["cycle_time_ms"], len(params["history"])), flush=True)
