"""tf_ring.spark.run_elastic's driver side: tasks register as they start
(live_tasks), tfringrun's elastic driver discovers their hosts through a
script listing them, and the ranks of each world fetch the function anew;
the last world's results are returned."""
import secrets
import sys

from tf_ring.hosted import job
from tf_ring.plumbing.job_settings import ElasticSettings
from tf_ring.spark import barrier_task, live_tasks
from tf_ring.spark.runner import Stage

WHO = "tf_ring.spark.run_elastic"
_FAIL_GRACE_S = 15.0
_DONE_GRACE_S = 5.0  # tasks end at once on the verdict; retries of lost ones never started


def run_elastic(fn, args, kwargs, num_proc, min_num_proc, max_num_proc, start_timeout,
                elastic_timeout, reset_limit, env, stdout, stderr, verbose, nics):
    from pyspark import SparkContext, cloudpickle
    context = SparkContext._active_spark_context
    if context is None:
        raise RuntimeError("%s needs a running Spark session: create one first with "
                           "SparkSession.builder.getOrCreate()" % WHO)
    num_proc = num_proc or context.defaultParallelism
    min_np = min_num_proc or num_proc
    max_np = max_num_proc or num_proc
    if not 1 <= min_np <= num_proc <= max_np:
        raise ValueError("%s: need 1 <= min_num_proc (%d) <= num_proc (%d) <= max_num_proc (%d)"
                         % (WHO, min_np, num_proc, max_np))
    secret = secrets.token_hex(32)
    directory = job.AgentDirectory()
    tasks = live_tasks.LiveTasks(directory)
    service, targets = job.serve(fn, args, kwargs, max_np, secret, cloudpickle.dumps,
                                 "pyspark.cloudpickle", nics, {"elastic_task": tasks.handle})
    # max_num_proc tasks: those without a free slot wait, and join the job
    # (a notice to rank 0, then a relaunch) when an executor frees one.
    stage = Stage(context, max_np, barrier_task.make_elastic_body(secret, targets, nics),
                  barrier=False)
    stage.start()
    try:
        try:
            tasks.wait_for_slots(min_np, start_timeout, stage, WHO)
            if verbose:
                print("%s: %d task slots registered; starting tfringrun's elastic driver"
                      % (WHO, tasks.slots()), file=stderr or sys.stderr, flush=True)
            elastic = ElasticSettings(min_np=min_np, max_np=max_np,
                                      discovery_script=directory.discovery,
                                      elastic_timeout=float(elastic_timeout),
                                      reset_limit=reset_limit)
            argv = job.launcher_argv(num_proc, None, directory.agent, start_timeout, nics, verbose,
                                     (env or {}).keys(), elastic=elastic)
            rc = job.run_launcher(argv, secret, targets, env, stdout, stderr)
        finally:
            service.close()
        results = job.collect(service, max_np, rc, WHO)
    except BaseException as failure:
        tasks.finish(False, str(failure) if isinstance(failure, job.JobFailed)
                     else "%s was interrupted on the driver" % WHO)
        stage.end(_FAIL_GRACE_S)
        raise
    finally:
        directory.close()
    tasks.finish(True)
    if not stage.end(_DONE_GRACE_S) and stage.error is not None:
        raise job.JobFailed("%s: every rank returned, but the Spark stage failed: %s"
                            % (WHO, stage.error))
    return results
