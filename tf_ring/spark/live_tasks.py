"""run_elastic's view of its tasks: those registered and still connected,
grouped by the address each connected from. It keeps the discovery list
tfringrun's elastic driver polls (tf_ring.hosted.job.AgentDirectory) up
to date as tasks come and go, and holds every task's connection until the
job's verdict."""
import threading
import time

from tf_ring.hosted import job
from tf_ring.plumbing import endpoints

POLL_S = 0.5


class LiveTasks:
    def __init__(self, directory):
        self.directory = directory
        self._tasks = []  # [(host address, service targets)], in registration order
        self._names = job.HostNames()
        self._changed = threading.Condition()
        self._verdict = None

    def slots(self):
        with self._changed:
            return len(self._tasks)

    def handle(self, channel, request):
        port, service_id, key = (request.get(k) for k in ("port", "service_id", "host_key"))
        if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
            raise ValueError("a task registered no valid port")
        if not all(isinstance(v, str) and v.isalnum() and len(v) <= 64 for v in (service_id, key)):
            raise ValueError("a task registered no valid service id and host key")
        host = channel.sock.getpeername()[0]
        task = (host, endpoints.format_endpoint(service_id, [host], port, key))
        with self._changed:
            self._tasks.append(task)
            self._publish()
            while self._verdict is None and not channel.dropped:
                self._changed.wait(POLL_S)
            verdict = self._verdict
            if verdict is None:  # the task (its executor, its host) is gone
                self._tasks.remove(task)
                self._publish()
                return
        channel.send(verdict)

    def wait_for_slots(self, count, timeout, stage, who):
        deadline = time.monotonic() + timeout
        with self._changed:
            while len(self._tasks) < count:
                if stage.error is not None:
                    raise job.JobFailed("%s: the Spark stage failed before the job started: %s"
                                        % (who, stage.error))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise job.JobFailed(
                        "%s: %d of the %d tasks needed to start (min_num_proc) registered within "
                        "start_timeout=%g s; add executors or lower min_num_proc"
                        % (who, len(self._tasks), count, timeout))
                self._changed.wait(min(left, POLL_S))

    def finish(self, ok, error=None):
        with self._changed:
            if self._verdict is None:
                self._verdict = {"ok": ok, "error": error}
                self._changed.notify_all()

    def _publish(self):
        """Rewrites the discovery list; a host whose tasks all left loses
        its name, so a machine that comes back is a new host to tfringrun
        (the old name may be blacklisted)."""
        hosts = {}
        for host, service in self._tasks:
            hosts.setdefault(host, [service, 0])[1] += 1
        names = self._names.name(hosts)
        self.directory.set_hosts([(names[h], s, k) for h, (s, k) in hosts.items()])
        self._changed.notify_all()

