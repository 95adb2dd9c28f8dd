"""A Ray driver for the elastic test: the elastic counter of
tests/spark_jobs/elastic_on_spark.py (one allreduce and one commit a step,
a STEP line per rank and step) through RayExecutor's elastic mode
(min_workers=1, max_workers=3) on a running Ray cluster; prints the last
world's results as one RESULTS line.

    python elastic_on_ray.py ADDRESS --nics NET [--steps 30]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "spark_jobs"))
import elastic_on_spark  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("address")
    parser.add_argument("--nics", required=True)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--step-s", type=float, default=0.4)
    args = parser.parse_args()
    import ray
    from ray import cloudpickle
    from tf_ring.ray import RayExecutor

    cloudpickle.register_pickle_by_value(elastic_on_spark)  # the ranks do not see this folder
    ray.init(address=args.address, log_to_driver=False)
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=180, nics=args.nics),
                           min_workers=1, max_workers=3, elastic_timeout=120)
    executor.start()
    results = executor.run(elastic_on_spark.elastic_counter, args=(args.steps, args.step_s))
    print("RESULTS " + json.dumps(results), flush=True)
    executor.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
