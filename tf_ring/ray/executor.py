"""tf_ring.ray.RayExecutor: Horovod's Ray API on tfringrun's machinery.

start() reserves a placement group, starts one HostAgent actor (agent.py)
per machine its bundles landed on, and keeps them; every run() then runs
tfringrun through those agents (tf_ring.hosted.job), so each call's ranks
are fresh processes, children of the agents' Open MPI daemons. Ray is
imported when start() is called, not with this module."""
import secrets
import sys
import time

from tf_ring.hosted import job
from tf_ring.ray import agent, elastic_hosts, placement

WHO = "tf_ring.ray.RayExecutor"


class RaySettings:
    """What RayExecutor.create_settings makes. ssh_identity_file and ssh_str
    are accepted for Horovod's sake and unused: the agents reach the nodes,
    not ssh."""

    def __init__(self, timeout_s=30, ssh_identity_file=None, ssh_str=None,
                 placement_group_timeout_s=100, nics=None, verbose=1):
        self.timeout_s, self.placement_group_timeout_s = timeout_s, placement_group_timeout_s
        self.ssh_identity_file, self.ssh_str = ssh_identity_file, ssh_str
        self.nics, self.verbose = nics, verbose

    @property
    def nics_spec(self):
        """nics as tfringrun's --network-interface takes it ("eth0,eth1" or
        subnets), or None."""
        if not self.nics:
            return None
        return self.nics if isinstance(self.nics, str) else ",".join(sorted(self.nics))


def call_with_executable(fn, executable_cls, args, kwargs):
    """What execute() runs on every rank: fn of the rank's own instance."""
    executable = None if executable_cls is None else executable_cls(*args, **kwargs)
    return fn(executable)


class RayExecutor:
    """Runs functions on tf_ring ranks placed on a Ray cluster's nodes.

    settings: RayExecutor.create_settings(...). Give num_workers (ranks
    packed onto as few nodes as fit them), or num_hosts (that many nodes,
    num_workers_per_host ranks on each). Each rank reserves cpus_per_worker
    CPUs, and with use_gpu gpus_per_worker GPUs (default 1).
    min_workers/max_workers: elastic mode instead (tf_ring.ray.elastic_hosts):
    every live node's CPUs offer floor(CPUs / cpus_per_worker) ranks, a run
    uses at least min_workers and at most max_workers of them, and goes on
    from the last commit when nodes leave or join; reset_limit and
    elastic_timeout as tfringrun's --reset-limit and --elastic-timeout."""

    @staticmethod
    def create_settings(timeout_s=30, ssh_identity_file=None, ssh_str=None,
                        placement_group_timeout_s=100, nics=None):
        """timeout_s: seconds for the agents to start in start(), and for
        every rank of a run to start (tfringrun's --start-timeout);
        placement_group_timeout_s: seconds start() waits for the cluster to
        grant the placement group; nics: the interface names or subnets
        (a set, list or comma-separated string) the job's traffic uses.
        ssh_identity_file and ssh_str are unused (no ssh is involved)."""
        return RaySettings(timeout_s, ssh_identity_file, ssh_str, placement_group_timeout_s, nics)

    def __init__(self, settings, num_workers=None, num_hosts=None, num_workers_per_host=1,
                 cpus_per_worker=1, use_gpu=False, gpus_per_worker=None, min_workers=None,
                 max_workers=None, reset_limit=None, elastic_timeout=600):
        self._elastic = None
        if min_workers is not None or max_workers is not None:
            self._init_elastic(settings, num_workers, num_hosts, cpus_per_worker, use_gpu,
                               min_workers, max_workers, reset_limit, elastic_timeout)
            return
        if bool(num_workers) == bool(num_hosts):
            raise ValueError("%s: give exactly one of num_workers and num_hosts (got %r and %r)"
                             % (WHO, num_workers, num_hosts))
        if num_hosts and num_workers_per_host < 1:
            raise ValueError("%s: num_workers_per_host must be at least 1" % WHO)
        if gpus_per_worker and not use_gpu:
            raise ValueError("%s: gpus_per_worker=%r needs use_gpu=True" % (WHO, gpus_per_worker))
        if use_gpu and gpus_per_worker is None:
            gpus_per_worker = 1
        self.settings = settings or RaySettings()
        self.use_gpu, self.cpus_per_worker = use_gpu, cpus_per_worker
        self.gpus_per_worker = gpus_per_worker if use_gpu else 0
        self._bundles, self._strategy, self._per_bundle = placement.bundles(
            num_workers, num_hosts, num_workers_per_host, cpus_per_worker, self.gpus_per_worker)
        self.num_workers = len(self._bundles) * self._per_bundle
        self.hosts, self.start_seconds = [], None
        self._group, self._agents, self._claims, self._services = None, [], [], []
        self._secret = secrets.token_hex(32)
        self._executable, self._env = (None, (), {}), {}

    def _init_elastic(self, settings, num_workers, num_hosts, cpus_per_worker, use_gpu,
                      min_workers, max_workers, reset_limit, elastic_timeout):
        """Elastic mode (elastic_hosts): ranks on whatever CPUs Ray's nodes offer."""
        if num_workers or num_hosts or use_gpu:
            raise ValueError("%s: elastic mode (min_workers/max_workers) takes its ranks from "
                             "the cluster's CPUs; give neither num_workers, num_hosts nor "
                             "use_gpu with it" % WHO)
        min_workers = min_workers or 1
        if min_workers < 1 or (max_workers is not None and max_workers < min_workers):
            raise ValueError("%s: need 1 <= min_workers (%d) <= max_workers (%s)"
                             % (WHO, min_workers, max_workers))
        self.settings = settings or RaySettings()
        self.cpus_per_worker, self.use_gpu, self.gpus_per_worker = cpus_per_worker, False, 0
        self.min_workers, self.max_workers = min_workers, max_workers
        self.reset_limit, self.elastic_timeout = reset_limit, elastic_timeout
        self.num_workers, self.hosts, self.start_seconds = None, [], None
        self._group, self._agents, self._claims, self._services = None, [], [], []
        self._secret = secrets.token_hex(32)
        self._executable, self._env = (None, (), {}), {}
        self._elastic = elastic_hosts.ElasticHosts(
            self._secret, self.settings.nics_spec, cpus_per_worker, min_workers, max_workers,
            self.settings.timeout_s, WHO)

    # -- lifetime --------------------------------------------------------
    def start(self, executable_cls=None, executable_args=None, executable_kwargs=None,
              extra_env_vars=None):
        """Reserves the placement group and starts one agent actor per
        machine. executable_cls(*executable_args, **executable_kwargs) is
        made on every rank of each execute() call (not kept between calls:
        the ranks are new processes each time). extra_env_vars: set on
        every rank."""
        import ray
        from ray.util.placement_group import placement_group, placement_group_table
        if self._group is not None:
            raise RuntimeError("%s: start() was already called" % WHO)
        started = time.monotonic()
        self._executable = (executable_cls, tuple(executable_args or ()),
                            dict(executable_kwargs or {}))
        self._env = {str(k): str(v) for k, v in (extra_env_vars or {}).items()}
        if self._elastic is not None:
            self._elastic.start()
            self.start_seconds = time.monotonic() - started
            return
        self._group = placement_group(self._bundles, strategy=self._strategy)
        try:
            self._wait_for_group(ray)
            bundle_nodes = placement_group_table(self._group)["bundles_to_node_id"]
            addresses = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}
            self.hosts = placement.group_hosts(bundle_nodes, addresses, self._per_bundle)
            self._start_agents(ray)
        except BaseException:
            self.shutdown()
            raise
        self.start_seconds = time.monotonic() - started
        if self.settings.verbose:
            print("%s: %d workers on %d host(s) (%s), started in %.1f s" % (
                WHO, self.num_workers, len(self.hosts),
                ", ".join("%s: %d" % (h.address, h.slots) for h in self.hosts),
                self.start_seconds), file=sys.stderr, flush=True)

    def _wait_for_group(self, ray):
        timeout = self.settings.placement_group_timeout_s
        try:
            ray.get(self._group.ready(), timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            raise TimeoutError(
                "%s: the cluster did not grant a placement group of %d bundles %s (%s) within "
                "placement_group_timeout_s=%g s; resources free now: %s" % (
                    WHO, len(self._bundles), self._bundles[0], self._strategy, timeout,
                    ray.available_resources())) from None

    def _start_agents(self, ray):
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        def on_bundle(actor_cls, index, gpus):
            return ray.remote(actor_cls).options(
                num_cpus=0, num_gpus=gpus, scheduling_strategy=PlacementGroupSchedulingStrategy(
                    self._group, placement_group_bundle_index=index))

        gpus = self._bundles[0].get("GPU", 0)
        nics = self.settings.nics_spec
        for host in self.hosts:
            other_ids = []
            if self.use_gpu:
                claims = [on_bundle(agent.GpuClaim, i, gpus).remote() for i in host.bundles[1:]]
                self._claims += claims
                for ids in ray.get([c.gpu_ids.remote() for c in claims],
                                   timeout=self.settings.timeout_s):
                    other_ids += ids
            self._agents.append(on_bundle(agent.HostAgent, host.bundles[0], gpus).remote(
                self._secret, nics, self.use_gpu, other_ids, self.cpus_per_worker))
        infos = ray.get([a.info.remote() for a in self._agents], timeout=self.settings.timeout_s)
        for host, info in zip(self.hosts, infos):
            host.hostname, host.service = info["hostname"], info["service"]
        self._services = [(h.service, h.slots) for h in self.hosts]

    def shutdown(self):
        """Stops the agents (and any ranks they still run) and removes the
        placement group; start() may be called again afterwards."""
        import ray
        if self._elastic is not None:
            self._elastic.stop()
            return
        if not ray.is_initialized():  # ray.shutdown() ended the actors and the group
            self._agents, self._claims, self._services, self._group = [], [], [], None
            return
        if self._agents:
            try:
                ray.get([a.close.remote() for a in self._agents], timeout=30)
            except Exception:  # noqa: B902 - a dead agent's node has no daemon to stop
                pass
        for actor in self._agents + self._claims:
            ray.kill(actor)
        self._agents, self._claims, self._services = [], [], []
        if self._group is not None:
            ray.util.remove_placement_group(self._group)
        self._group = None

    # -- calls -----------------------------------------------------------
    def run(self, fn, args=None, kwargs=None):
        """fn(*args, **kwargs) on every rank; the return values in rank order.
        A rank that raises makes run raise tf_ring.hosted.job.JobFailed naming
        it, with its traceback."""
        return self._run(fn, tuple(args or ()), dict(kwargs or {}), self._services, "run")

    def execute(self, fn):
        """fn(executable) on every rank, executable being the rank's instance
        of start()'s executable_cls (None without one); results in rank order."""
        return self._run(call_with_executable, (fn,) + self._executable, {}, self._services,
                         "execute")

    def execute_single(self, fn):
        """fn(executable) once, as a job of one rank on rank 0's host (so
        there hvd.size() == 1); its return value."""
        services = self._services
        if self._elastic is not None:  # a plain one-rank job on the first live node
            services = self._elastic.services()
        first_host = [(services[0][0], 1)] if services else []
        return self._run(call_with_executable, (fn,) + self._executable, {}, first_host,
                         "execute_single")[0]

    def _run(self, fn, args, kwargs, services, method):
        if self._elastic is not None and method != "execute_single":
            return self._elastic.run(fn, args, kwargs, self._env, self.settings.verbose,
                                     self.elastic_timeout, self.reset_limit,
                                     "%s.%s" % (WHO, method))
        if not services:
            raise RuntimeError("%s.%s: call start() first" % (WHO, method))
        from ray import cloudpickle
        return job.run_function(fn, args, kwargs, services, self._secret, cloudpickle.dumps,
                                "ray.cloudpickle", nics=self.settings.nics_spec,
                                start_timeout=self.settings.timeout_s, env=self._env,
                                verbose=self.settings.verbose, who="%s.%s" % (WHO, method))
