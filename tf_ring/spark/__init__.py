"""tf_ring on Spark: run a training function on the executors of the running
SparkSession, ranks grouped by real host (docs/spark-ray-kubernetes.md).

    import tf_ring.spark
    results = tf_ring.spark.run(train, args=(epochs,), num_proc=4)

    results = tf_ring.spark.run_elastic(train, num_proc=4, min_num_proc=2)

pyspark is imported when run() or run_elastic() is called, not with this module
(pip install "tf_ring[spark]")."""


def run(fn, args=(), kwargs=None, num_proc=None, start_timeout=600, env=None, stdout=None,
        stderr=None, verbose=1, nics=None):
    """Runs fn(*args, **kwargs) on `num_proc` ranks (default: the Spark
    context's default parallelism), one Spark barrier task per rank, and
    returns every rank's return value in rank order.

    start_timeout: seconds for all tasks to start and for all ranks to
    start after them; env: variables set on every rank, on top of the
    driver's; stdout/stderr: text streams the job's output goes to
    (default: the driver's own); verbose: 2 prints tfringrun's plan;
    nics: the interfaces or subnets (e.g. "eth1" or "10.0.0.0/24") the job's
    traffic uses, as tfringrun's --network-interface.

    Raises tf_ring.hosted.job.JobFailed naming the ranks that failed and
    the first one's traceback; the Spark job fails with that error too."""
    from tf_ring.spark import runner
    return runner.run(fn, args, kwargs, num_proc, start_timeout, env, stdout, stderr, verbose,
                      nics)


def run_elastic(fn, args=(), kwargs=None, num_proc=None, min_num_proc=None, max_num_proc=None,
                start_timeout=600, elastic_timeout=600, reset_limit=None, env=None, stdout=None,
                stderr=None, verbose=1, nics=None):
    """Runs fn(*args, **kwargs) as an elastic job (fn uses tf_ring.elastic's
    state and @elastic.run): Spark tasks (max_num_proc of them, default
    num_proc; not a barrier stage) each offer one rank slot on their host as
    they start, and tfringrun's elastic driver runs a world on the slots of
    the tasks still alive, at least min_num_proc (default num_proc), from
    num_proc. A lost executor's ranks are lost with it: the job restarts on
    the others from the last commit; a task that starts later adds its
    slot. Returns the last world's return values in rank order.

    elastic_timeout: seconds to wait for min_num_proc slots after a loss;
    reset_limit: fail after that many relaunches; the rest as run()."""
    from tf_ring.spark import elastic_runner
    return elastic_runner.run_elastic(fn, args, kwargs, num_proc, min_num_proc, max_num_proc,
                                      start_timeout, elastic_timeout, reset_limit, env, stdout,
                                      stderr, verbose, nics)
