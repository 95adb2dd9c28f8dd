"""The body of tf_ring.spark.run's barrier tasks, run on the executors.

Each task starts a task service, joins one allGather of (task, executor
host, service address), registers with the driver (task 0 sends the
table), and then waits for the driver's word that the job ended: the
service starts Open MPI's daemon for the host's ranks meanwhile. A failed
job fails the task with the job's error, so the Spark job fails too."""
import socket

from tf_ring.hosted import frames, job, task_service
from tf_ring.plumbing import endpoints
from tf_ring.plumbing.sealed_frames import ChannelError
from tf_ring.spark import hosts_table


def make_body(secret, driver_targets, nics):
    def body(_partition):
        from pyspark import BarrierTaskContext
        context = BarrierTaskContext.get()
        index = context.partitionId()
        host = context.getTaskInfos()[index].address.rsplit(":", 1)[0]
        addresses = _service_addresses(host, nics)
        bind = addresses[0] if nics and len(addresses) == 1 else "0.0.0.0"
        service = task_service.TaskService(secret, bind)
        try:
            gathered = context.allGather(hosts_table.entry(
                index, host, service.endpoint(addresses)))
            channel = frames.connect(driver_targets, secret, frames.FUNCTION)
            _register_until_the_verdict(channel, {
                "op": "task", "index": index,
                "table": hosts_table.parse(gathered) if index == 0 else None})
        finally:
            service.close()
        yield index
    return body


def make_elastic_body(secret, driver_targets, nics):
    """run_elastic's tasks: no barrier (Spark retries a lost task alone, on
    any executor with a free slot, and a task that starts late adds its host
    to the job). Each registers its service's port and id; the driver takes
    the address the task connected from as its host's. A task that finds the
    driver gone (the job ended before it started) just returns."""
    def body(_partition):
        from pyspark import TaskContext
        index = TaskContext.get().partitionId()
        addresses = job.machine_addresses(nics) if nics else ["0.0.0.0"]
        service = task_service.TaskService(secret, addresses[0] if len(addresses) == 1
                                           else "0.0.0.0")
        try:
            try:
                channel = frames.connect(driver_targets, secret, frames.FUNCTION)
            except (ChannelError, OSError):
                return
            _register_until_the_verdict(channel, {
                "op": "elastic_task", "index": index, "port": service.port,
                "service_id": service.service_id, "host_key": endpoints.host_key()})
        finally:
            service.close()
        yield index
    return body


def _register_until_the_verdict(channel, registration):
    """Registers with the driver and waits for the job's verdict; a failed
    job fails this task (and so the Spark job) with the job's error."""
    channel.send(registration)
    verdict = channel.receive()  # when the job has ended
    channel.close()
    if not verdict.get("ok"):
        raise RuntimeError(verdict.get("error") or "the tf_ring job failed")


def _service_addresses(executor_host, nics):
    """Where the driver's agent tries to reach this task: the job's network
    with `nics`, else the address Spark knows the executor by first. A
    host-local address (a host name that resolves to 127.x, as many
    /etc/hosts have it) only when there is nothing else."""
    if nics:
        chosen = job.machine_addresses(nics)
        if chosen:
            return chosen
    try:
        first = socket.gethostbyname(executor_host)
    except OSError:
        first = executor_host
    return endpoints.published([first] + job.machine_addresses())
