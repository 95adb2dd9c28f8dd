"""The Ray actors RayExecutor starts on the nodes of its placement group
(the executor wraps these plain classes with ray.remote).

HostAgent: one per host, in the host's first bundle. It runs a TaskService
(tf_ring.hosted.task_service) for as long as the executor lives: every
run() has it start Open MPI's daemon, whose children are that run's ranks.
GpuClaim: holds the GPUs of a host's other bundles and says which they are,
so the agent can show the ranks every GPU of the host's bundles."""
import math
import os
import socket

from tf_ring.hosted import job, task_service
from tf_ring.plumbing import endpoints


def service_addresses(nics=None):
    """Where the driver's rsh agent tries to reach this node: the addresses
    of `nics` when given and present, else the IP Ray knows the node by
    first, then this machine's other addresses; a host-local one only when
    there is nothing else (tf_ring.plumbing.endpoints)."""
    if nics:
        chosen = job.machine_addresses(nics)
        if chosen:
            return chosen
    import ray
    first = ray.util.get_node_ip_address()
    return endpoints.published([first] + job.machine_addresses())


class HostAgent:
    def __init__(self, secret, nics=None, use_gpu=False, other_gpu_ids=(), cpus_per_worker=1):
        # Ray gave this 0-CPU actor OMP_NUM_THREADS=1; a rank gets what Ray
        # gives an actor of cpus_per_worker CPUs (extra_env_vars override it).
        os.environ["OMP_NUM_THREADS"] = str(max(math.floor(cpus_per_worker), 1))
        if use_gpu:  # Ray shows an actor only its own GPUs; ranks get the host's
            import ray
            ids = [str(i) for i in ray.get_gpu_ids()] + [str(i) for i in other_gpu_ids]
            os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(ids)
        addresses = service_addresses(nics)
        bind = addresses[0] if nics and len(addresses) == 1 else "0.0.0.0"
        self._service = task_service.TaskService(secret, bind)
        self._targets = self._service.endpoint(addresses)

    def info(self):
        """The task service's endpoint, this host's name and the
        agent's process id."""
        return {"service": self._targets, "hostname": socket.gethostname(), "pid": os.getpid(),
                "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}

    def commands_run(self):
        return self._service.commands_run

    def close(self):
        """Stops the service and kills any daemon (and its ranks) still running."""
        self._service.close()
        return True


class GpuClaim:
    def gpu_ids(self):
        import ray
        return [str(i) for i in ray.get_gpu_ids()]
