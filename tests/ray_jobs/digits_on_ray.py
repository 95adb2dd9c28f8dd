"""A Ray driver for the tests: Keras 3 digits training through
tf_ring.ray.RayExecutor (the training function and the summary are the
Spark driver's, tests/spark_jobs/digits_on_spark.py), a run whose rank 1
raises, execute()/execute_single() with an executable class, workers
with GPUs (made-up ones: Ray only hands out their ids), and num_hosts=N
(one worker per host); prints one JSON line per step for the
test to check, with how long it took.

    python digits_on_ray.py local WORKERS[,...] [--gpus N] [--num-hosts N]  # ray.init() here
    python digits_on_ray.py ADDRESS WORKERS [--nics NET] [--digits-only] [--num-hosts N]
"""
import argparse
import json
import os
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "spark_jobs"))
import digits_on_spark  # noqa: E402


class Counter:
    """execute()'s executable: made on every rank of every call."""

    def __init__(self, start, step=1):
        self.value, self.step = start, step

    def advance(self):
        self.value += self.step
        return self.value


def fail_on_rank_one():
    """Fails without TensorFlow (a rank importing it costs seconds here)."""
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    if rank == 1:
        raise ValueError("rank 1 refuses to train")
    return rank


def rank_and_count(counter):
    return int(os.environ["OMPI_COMM_WORLD_RANK"]), counter.advance()


def where_am_i():
    return (int(os.environ["OMPI_COMM_WORLD_RANK"]), socket.gethostname(),
            int(os.environ["OMPI_COMM_WORLD_LOCAL_SIZE"]))


def visible_gpus():
    return int(os.environ["OMPI_COMM_WORLD_RANK"]), os.environ.get("CUDA_VISIBLE_DEVICES")


def say(**fields):
    print(json.dumps(fields), flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("address", help="'local' for a Ray started here, else a cluster's address")
    parser.add_argument("workers", help="comma-separated worker counts, one digits run each")
    parser.add_argument("--nics", default=None)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--digits-only", action="store_true",
                        help="skip the failing run and execute()")
    parser.add_argument("--gpus", type=int, default=0,
                        help="local: declare N (made-up) GPUs, then run visible_gpus with "
                             "N workers of use_gpu=True")
    parser.add_argument("--num-hosts", type=int, default=0,
                        help="then digits training with num_hosts=N, 1 worker per host")
    args = parser.parse_args()
    import ray
    from ray import cloudpickle
    from tf_ring.hosted.job import JobFailed
    from tf_ring.ray import RayExecutor

    # The ranks do not see this directory: ship the shared functions by value.
    cloudpickle.register_pickle_by_value(digits_on_spark)
    started = time.monotonic()
    if args.address == "local":
        ray.init(num_cpus=3, num_gpus=args.gpus, include_dashboard=False, log_to_driver=False)
    else:
        ray.init(address=args.address, log_to_driver=False)
    say(step="ray.init", seconds=time.monotonic() - started,
        nodes=sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]))
    settings = RayExecutor.create_settings(timeout_s=180, nics=args.nics)
    for index, workers in enumerate(map(int, args.workers.split(","))):
        executor = RayExecutor(settings, num_workers=workers)
        started = time.monotonic()
        executor.start(executable_cls=Counter, executable_args=(10,),
                       executable_kwargs={"step": 5})
        say(step="start", workers=workers, seconds=time.monotonic() - started,
            hosts=[[h.hostname, h.slots] for h in executor.hosts])
        started = time.monotonic()
        results = executor.run(digits_on_spark.train_digits, args=(args.epochs,))
        say(step="digits", workers=workers, seconds=time.monotonic() - started,
            **digits_on_spark.summary(results))
        if index == 0 and not args.digits_only:  # the other calls once, on the first executor
            started = time.monotonic()
            try:
                executor.run(fail_on_rank_one)
                outcome = {"raised": None}
            except JobFailed as e:
                outcome = {"raised": str(e), "failed_ranks": sorted(e.errors)}
            say(step="fails", seconds=time.monotonic() - started, **outcome)
            started = time.monotonic()
            say(step="execute", every=executor.execute(rank_and_count),
                single=executor.execute_single(rank_and_count),
                seconds=time.monotonic() - started)
        executor.shutdown()
    if args.gpus:  # Ray hands out GPU ids it was told of; no GPU needs to be there
        gpu_executor = RayExecutor(settings, num_workers=args.gpus, use_gpu=True)
        started = time.monotonic()
        gpu_executor.start()
        say(step="gpus", every=gpu_executor.run(visible_gpus), seconds=time.monotonic() - started)
        gpu_executor.shutdown()
    if args.num_hosts:
        spread = RayExecutor(RayExecutor.create_settings(timeout_s=180, nics=args.nics,
                                                         placement_group_timeout_s=5),
                             num_hosts=args.num_hosts)
        started = time.monotonic()
        try:
            spread.start()
            outcome = {"every": spread.run(where_am_i)}
            outcome.update(digits_on_spark.summary(
                spread.run(digits_on_spark.train_digits, args=(args.epochs,))))
        except TimeoutError as e:
            outcome = {"raised": str(e)}
        finally:
            spread.shutdown()
        say(step="num_hosts", seconds=time.monotonic() - started, **outcome)
    # shutdown() removed every placement group: all CPUs come free again.
    deadline = time.monotonic() + 15
    while (ray.available_resources().get("CPU") != ray.cluster_resources().get("CPU")
           and time.monotonic() < deadline):
        time.sleep(0.2)
    say(step="end", groups=sorted(g["state"] for g in ray.util.placement_group_table().values()),
        cpus_free=ray.available_resources().get("CPU"), cpus=ray.cluster_resources().get("CPU"))
    ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
