"""What starting a job through Spark costs (docs/spark-ray-kubernetes.md):
the same trivial tf_ring job (init, one allreduce, return the rank) run by
tfringrun directly and by tf_ring.spark.run on a local-cluster, in one run.
Prints the Spark session's start, then per repeat: tfringrun's seconds,
tf_ring.spark.run's seconds and their difference (the barrier stage, the
task services and the daemons started through them).

    python benchmarks/spark_startup.py [--ranks 2] [--repeats 3] [--master local-cluster[2,1,1024]]
"""
import argparse
import os
import subprocess
import sys
import time

PROBE = ("import tensorflow as tf, tf_ring as hvd; hvd.init(); "
         "hvd.allreduce(tf.constant([1.0])); print(hvd.rank())")


def trivial_job():
    import tensorflow as tf
    import tf_ring as hvd
    hvd.init()
    hvd.allreduce(tf.constant([1.0]))
    return hvd.rank()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--master", default="local-cluster[2,1,1024]")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    import tf_ring.spark

    started = time.time()
    spark = SparkSession.builder.master(args.master).config("spark.ui.enabled", "false") \
        .getOrCreate()
    print("Spark session (%s): %.1f s; load average %.1f"
          % (args.master, time.time() - started, os.getloadavg()[0]))
    print("%-7s %-12s %-18s %-10s" % ("repeat", "tfringrun s", "tf_ring.spark.run s", "Spark adds"))
    for repeat in range(args.repeats):
        started = time.time()
        subprocess.run([sys.executable, "-m", "tf_ring.run", "-np", str(args.ranks),
                        sys.executable, "-c", PROBE], check=True, stdout=subprocess.DEVNULL)
        direct = time.time() - started
        started = time.time()
        ranks = tf_ring.spark.run(trivial_job, num_proc=args.ranks, verbose=0)
        hosted = time.time() - started
        assert ranks == list(range(args.ranks)), ranks
        print("%-7d %-12.2f %-18.2f %-10.2f" % (repeat, direct, hosted, hosted - direct))
    spark.stop()


if __name__ == "__main__":
    main()
