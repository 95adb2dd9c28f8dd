"""A Spark driver for the elastic test: an elastic counter (tf_ring.elastic
ObjectState, one allreduce and one commit a step) through
tf_ring.spark.run_elastic on 2 task slots, going on with 1. Ranks print a
STEP line (with their host) each step, so the test can kill a host
mid-run; the driver prints the last world's results as one JSON line.

    python elastic_on_spark.py MASTER --driver-host ADDR --nics NET [--steps 30]
"""
import argparse
import json
import os
import sys


def elastic_counter(steps, step_s):
    import socket
    import time

    import tensorflow as tf
    import tf_ring as hvd
    from tf_ring import elastic

    hvd.init()
    state = elastic.ObjectState(step=0, total=0)
    began = {}

    @elastic.run
    def train(state):
        began.setdefault("step", state.step)  # where this world resumed
        while state.step < steps:
            size = int(hvd.allreduce(tf.constant(1.0), op=hvd.Sum, name="count").numpy())
            state.total += state.step
            state.step += 1
            print("STEP rank=%d size=%d step=%d host=%s" % (hvd.rank(), size, state.step,
                                                            socket.gethostname()), flush=True)
            time.sleep(step_s)
            state.commit()

    train(state)
    return {"rank": hvd.rank(), "size": hvd.size(), "step": state.step, "total": state.total,
            "resumed_at": began["step"], "host": socket.gethostname(),
            "world": int(os.environ.get("TF_RING_ELASTIC_WORLD", "0"))}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("master")
    parser.add_argument("--driver-host", required=True)
    parser.add_argument("--nics", required=True)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--step-s", type=float, default=0.4)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    import tf_ring.spark

    spark = (SparkSession.builder.master(args.master).appName("tf_ring-elastic-tests")
             .config("spark.ui.enabled", "false").config("spark.executor.memory", "512m")
             .config("spark.driver.host", args.driver_host)
             .config("spark.driver.bindAddress", args.driver_host).getOrCreate())
    results = tf_ring.spark.run_elastic(elastic_counter, args=(args.steps, args.step_s),
                                        num_proc=2, min_num_proc=1, max_num_proc=2,
                                        elastic_timeout=120, start_timeout=180, nics=args.nics)
    print("RESULTS " + json.dumps(results), flush=True)
    spark.stop()


if __name__ == "__main__":
    sys.exit(main())
