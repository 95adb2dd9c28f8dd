"""tf_ring.spark.run's driver side: one barrier stage of task services, then
tfringrun through them (tf_ring.hosted.job)."""
import secrets
import sys
import threading
import time

from tf_ring.hosted import job
from tf_ring.spark import barrier_task, hosts_table

WHO = "tf_ring.spark.run"
# After a failed job, how long the tasks get to fail the Spark job with its
# error before the driver cancels the stage (which would retry it).
_FAIL_GRACE_S = 15.0


class _Tasks:
    """The barrier tasks' registrations: task 0's host table, and every
    task's connection, held until the job's verdict."""

    def __init__(self, num_proc):
        self.num_proc, self.table, self.registered = num_proc, None, 0
        self._changed = threading.Condition()
        self._verdict = None

    def handle(self, channel, request):
        with self._changed:
            if request.get("index") == 0:
                table = request.get("table")
                if not isinstance(table, list) or len(table) != self.num_proc:
                    raise ValueError("task 0 sent no table of %d tasks" % self.num_proc)
                self.table = table
            self.registered += 1
            self._changed.notify_all()
            while self._verdict is None:
                self._changed.wait()
            verdict = self._verdict
        channel.send(verdict)

    def finish(self, ok, error=None):
        with self._changed:
            if self._verdict is None:
                self._verdict = {"ok": ok, "error": error}
                self._changed.notify_all()

    def wait_for_table(self, timeout, stage):
        deadline = time.monotonic() + timeout
        with self._changed:
            while self.table is None:
                if stage.error is not None:
                    raise job.JobFailed("%s: the Spark stage failed before the job started: %s"
                                        % (WHO, stage.error))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise job.JobFailed(
                        "%s: %d of %d barrier tasks registered within start_timeout=%g s. A "
                        "barrier stage starts only when the cluster has %d free task slots at "
                        "once (executor cores / spark.task.cpus); lower num_proc or add executors"
                        % (WHO, self.registered, self.num_proc, timeout, self.num_proc))
                self._changed.wait(min(left, 0.5))
            return self.table


class Stage(threading.Thread):
    """The Spark job of the tasks (a barrier stage unless barrier=False),
    run in its own job group so that it can be cancelled."""

    def __init__(self, context, num_proc, body, barrier=True):
        super().__init__(daemon=True, name="tf_ring-spark-stage")
        self.context, self.num_proc, self.body, self.barrier = context, num_proc, body, barrier
        self.group = "tf_ring-%s" % secrets.token_hex(4)
        self.error = None

    def run(self):
        try:
            self.context.setJobGroup(self.group, "tf_ring.spark.run: %d ranks" % self.num_proc,
                                     interruptOnCancel=True)
            rdd = self.context.parallelize(range(self.num_proc), self.num_proc)
            (rdd.barrier() if self.barrier else rdd).mapPartitions(self.body).collect()
        except Exception as e:  # noqa: B902 - reported by run()
            self.error = spark_error_summary(e)

    def end(self, grace):
        """Waits `grace` s for the tasks to end, then cancels what is left;
        True if the stage was cancelled."""
        self.join(grace)
        if not self.is_alive():
            return False
        self.context.cancelJobGroup(self.group)
        self.join(30.0)
        return True


def spark_error_summary(error):
    """The line of a Spark job's error that says what went wrong: the
    executor's Python exception, not py4j's "An error occurred while
    calling ..." nor the Java stack."""
    lines = str(error).splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Traceback (most recent call last)"):
            for after in lines[i + 1:]:
                if after and not after[0].isspace():
                    return after.strip()
    return "%s: %s" % (type(error).__name__, lines[0] if lines else "")


def run(fn, args, kwargs, num_proc, start_timeout, env, stdout, stderr, verbose, nics):
    from pyspark import SparkContext, cloudpickle
    context = SparkContext._active_spark_context
    if context is None:
        raise RuntimeError("%s needs a running Spark session: create one first with "
                           "SparkSession.builder.getOrCreate()" % WHO)
    num_proc = num_proc or context.defaultParallelism
    if num_proc < 1:
        raise ValueError("%s: num_proc must be at least 1, got %d" % (WHO, num_proc))
    secret = secrets.token_hex(32)
    tasks = _Tasks(num_proc)
    service, targets = job.serve(fn, args, kwargs, num_proc, secret, cloudpickle.dumps,
                                 "pyspark.cloudpickle", nics, {"task": tasks.handle})
    stage = Stage(context, num_proc, barrier_task.make_body(secret, targets, nics))
    started = time.monotonic()
    stage.start()
    try:
        hosts = hosts_table.group_by_host(tasks.wait_for_table(start_timeout, stage))
        if verbose:
            print("%s: %d ranks on %d host(s) (%s), tasks started in %.1f s" % (
                WHO, num_proc, len(hosts), ", ".join("%s: %d" % (h, k) for _, k, h in hosts),
                time.monotonic() - started), file=stderr or sys.stderr, flush=True)
        results = job.launch(service, targets, [(s, k) for s, k, _ in hosts], secret,
                             start_timeout, env, stdout, stderr, verbose, nics, who=WHO)
    except job.JobFailed as failure:
        tasks.finish(False, str(failure))
        stage.end(_FAIL_GRACE_S)
        raise
    except BaseException:
        tasks.finish(False, "%s was interrupted on the driver" % WHO)
        stage.end(_FAIL_GRACE_S)
        raise
    finally:
        service.close()
    tasks.finish(True)
    stage.end(60.0)
    if stage.error is not None:
        raise job.JobFailed("%s: every rank returned, but the Spark stage failed: %s"
                            % (WHO, stage.error))
    return results
