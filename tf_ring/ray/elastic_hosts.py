"""RayExecutor's elastic mode (min_workers/max_workers): Ray's own view of
the cluster as tfringrun's host discovery.

Every second the driver reads ray.nodes(): each live node with CPUs for at
least one worker gets an agent actor pinned to it (0 CPUs, a task service
as in the fixed mode) and offers floor(CPUs / cpus_per_worker) rank slots;
a node Ray reports dead leaves the list. Nodes on one address are one host.
A run is tfringrun's elastic mode over that list (discovery script,
--min-np/--max-np): a lost node's ranks restart on the rest from the last
commit, a node that joins is offered to rank 0 at its next commit."""
import threading
import time

from tf_ring.hosted import job
from tf_ring.plumbing.job_settings import ElasticSettings
from tf_ring.ray import agent

POLL_S = 1.0
NO_LIMIT = 1 << 16  # max_workers not given: as many ranks as the cluster offers


class ElasticHosts:
    def __init__(self, secret, nics, cpus_per_worker, min_workers, max_workers, timeout_s,
                 who):
        self.secret, self.nics, self.cpus_per_worker = secret, nics, cpus_per_worker
        self.min_workers, self.max_workers = min_workers, max_workers or NO_LIMIT
        self.timeout_s, self.who = timeout_s, who
        self.directory = job.AgentDirectory()
        self._agents = {}  # Ray node id -> (actor, node address, service targets, slots)
        self._names = job.HostNames()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None

    def start(self):
        import ray
        self._poll(ray)
        self._thread = threading.Thread(target=self._watch, args=(ray,), daemon=True,
                                        name="tf_ring-ray-nodes")
        self._thread.start()

    def stop(self):
        import ray
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        with self._lock:
            agents, self._agents = list(self._agents.values()), {}
        for actor, _, _, _ in agents:
            try:
                ray.kill(actor)
            except Exception:  # noqa: B902 - its node may be gone already
                pass
        self.directory.close()

    def slots(self):
        with self._lock:
            return sum(slots for _, _, _, slots in self._agents.values())

    def services(self):
        """[(task service targets, slots)] of the live nodes."""
        with self._lock:
            return [(service, slots) for _, _, service, slots in self._agents.values()]

    def run(self, fn, args, kwargs, env, verbose, elastic_timeout, reset_limit, what):
        from ray import cloudpickle
        deadline = time.monotonic() + elastic_timeout
        while self.slots() < self.min_workers:
            if time.monotonic() > deadline:
                raise job.JobFailed("%s: the cluster offers %d worker slots of %g CPUs, fewer "
                                    "than min_workers=%d, after elastic_timeout=%g s"
                                    % (what, self.slots(), self.cpus_per_worker, self.min_workers,
                                       elastic_timeout))
            time.sleep(POLL_S)
        service, targets = job.serve(fn, args, kwargs, self.max_workers, self.secret,
                                     cloudpickle.dumps, "ray.cloudpickle", self.nics)
        first = max(self.min_workers, min(self.slots(), self.max_workers))
        elastic = ElasticSettings(min_np=self.min_workers, max_np=self.max_workers,
                                  discovery_script=self.directory.discovery,
                                  elastic_timeout=float(elastic_timeout), reset_limit=reset_limit)
        argv = job.launcher_argv(first, None, self.directory.agent, self.timeout_s, self.nics,
                                 verbose, (env or {}).keys(), elastic=elastic)
        try:
            rc = job.run_launcher(argv, self.secret, targets, env)
        finally:
            service.close()
        return job.collect(service, self.max_workers, rc, what)

    def _watch(self, ray):
        while not self._stop.wait(POLL_S):
            try:
                self._poll(ray)
            except Exception:  # noqa: B902 - the next poll tries again
                pass

    def _poll(self, ray):
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        alive = {n["NodeID"]: n for n in ray.nodes() if n["Alive"]}
        for node_id, node in alive.items():
            slots = int(node["Resources"].get("CPU", 0) // self.cpus_per_worker)
            if slots < 1 or node_id in self._agents or self._stop.is_set():
                continue
            actor = ray.remote(agent.HostAgent).options(
                num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)
            ).remote(self.secret, self.nics, False, (), self.cpus_per_worker)
            try:
                info = ray.get(actor.info.remote(), timeout=self.timeout_s)
            except Exception:  # noqa: B902 - the node went away meanwhile; a later poll retries
                ray.kill(actor)
                continue
            with self._lock:
                self._agents[node_id] = (actor, node["NodeManagerAddress"], info["service"], slots)
        with self._lock:
            for node_id in [n for n in self._agents if n not in alive]:
                del self._agents[node_id]  # its actor died with the node
            self._publish()

    def _publish(self):
        hosts = {}
        for _, address, service, slots in self._agents.values():
            hosts.setdefault(address, [service, 0])[1] += slots
        names = self._names.name(hosts)
        self.directory.set_hosts([(names[a], s, k) for a, (s, k) in hosts.items()])
