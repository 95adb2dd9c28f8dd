"""A hosted job's driver side: run `fn` on ranks placed on hosts whose task
services (task_service) a framework started, through tfringrun, and return
every rank's result in rank order.

The hosts get made-up names (tfring-host-0, ...), so mpirun reaches every
one, the driver's machine included, through the rsh agent and never starts
ranks beside the driver by itself."""
import json
import os
import pickle
import shlex
import subprocess
import tempfile
import threading

from tf_ring.hosted import frames, function_service, rank_entry, task_service
from tf_ring.plumbing import endpoints, interface_addresses, job_settings, module_command
from tf_ring.plumbing.job_settings import JobSettings

HOST_NAME = "tfring-host-%d"
# The ranks run the task's own Python (task_service sets it for the daemon),
# whose version is not known here: without the working directory on the
# module path (module_command).
RANK_COMMAND = module_command.module_shell("tf_ring.hosted.rank_entry",
                                           '"${%s:-python3}"' % task_service.PYTHON_ENV)


class JobFailed(RuntimeError):
    """The job failed; `errors` maps each rank that raised to its traceback text."""

    def __init__(self, message, errors=None, exit_code=None):
        super().__init__(message)
        self.errors, self.exit_code = dict(errors or {}), exit_code


def machine_addresses(nics=None):
    """Where other hosts try to reach this machine: the addresses of `nics` (an
    interface or subnet list, as --network-interface takes), else every
    address of this machine; host-local ones (loopback, link-local) only
    when there is nothing else, and then only clients on this machine use
    them (tf_ring.plumbing.endpoints)."""
    if nics:
        chosen = interface_addresses.addresses_for(nics)
        if chosen:
            return endpoints.published(chosen)
    return endpoints.published(interface_addresses.all_addresses().values()) or ["127.0.0.1"]


def launcher_argv(num_proc, hosts, agent, start_timeout, nics=None, verbose=1, env_keys=(),
                  elastic=None):
    """tfringrun's argv for `hosts` [(name, slots)], or with `elastic` (an
    ElasticSettings whose discovery script lists the hosts as they come and
    go) for an elastic job: the job's JobSettings as flags."""
    # Every daemon is started from the driver: PRRTE's tree spawn would have
    # the first daemons run the agent on their hosts, where it does not exist.
    mpi_args = ["--prtemca", "plm_ssh_no_tree_spawn", "1"]
    for key in sorted(env_keys):  # tfringrun forwards TF_*, PATH and a few more by itself
        mpi_args += ["-x", shlex.quote(key)]
    settings = JobSettings(
        command=["sh", "-c", RANK_COMMAND], np=num_proc,
        host_list=None if elastic else list(hosts), rsh_agent=agent,
        start_timeout=float(start_timeout), network_interface=nics or None,
        verbose=verbose >= 2, mpi_args=" ".join(mpi_args), elastic=elastic)
    return module_command.module_argv("tf_ring.run") + job_settings.launcher_argv(settings)


class HostNames:
    """Made-up names for the hosts present now, stable while a host stays;
    a host that left and comes back gets a new name, so an elastic driver
    that blacklisted the old one takes it as a new host."""

    def __init__(self):
        self._names, self._made = {}, 0

    def name(self, hosts):
        """{host: name} for `hosts` (any keys), forgetting hosts not among them."""
        for host in hosts:
            if host not in self._names:
                self._names[host] = HOST_NAME % self._made
                self._made += 1
        for gone in set(self._names) - set(hosts):
            del self._names[gone]
        return dict(self._names)


class AgentDirectory:
    """A private directory (0700) holding the rsh agent, its map of host
    names to task services and, for elastic jobs, the discovery script and
    the host list it prints; set_hosts() rewrites both atomically as hosts
    come and go."""

    def __init__(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="tf_ring-hosted-")
        self.path = self._tmp.name
        self._map, self._list = (os.path.join(self.path, n) for n in ("hosts.json", "hosts.txt"))
        self.set_hosts([])
        # The agent runs in this private directory, not in mpirun's.
        agent = module_command.module_argv("tf_ring.hosted.rsh_agent") + ["--hosts", self._map]
        self.agent = self._script("rsh_agent", "cd %s && exec %s \"$@\"" % (
            shlex.quote(self.path), " ".join(shlex.quote(w) for w in agent)))
        self.discovery = self._script("discover_hosts", "exec cat %s" % shlex.quote(self._list))

    def set_hosts(self, hosts):
        """hosts: [(name, task service endpoint, slots)]."""
        self._replace(self._map, json.dumps({name: service for name, service, _ in hosts}))
        self._replace(self._list, "".join("%s:%d\n" % (name, slots) for name, _, slots in hosts))

    def close(self):
        self._tmp.cleanup()

    def _script(self, name, line):
        path = os.path.join(self.path, name)
        self._replace(path, "#!/bin/sh\n%s\n" % line)
        os.chmod(path, 0o700)
        return path

    @staticmethod
    def _replace(path, text):
        with open(path + ".new", "w") as f:
            f.write(text)
        os.replace(path + ".new", path)


def _pump(stream, out):
    for chunk in iter(lambda: os.read(stream.fileno(), 65536), b""):
        out.write(chunk.decode(errors="replace"))
        out.flush()


def serve(fn, args, kwargs, num_proc, secret, dumps, pickler, nics=None, handlers=None):
    """Starts the driver's FunctionService for fn(*args, **kwargs) on
    `num_proc` ranks (at most); returns it and where ranks and tasks reach it
    (its endpoint). `dumps`/`pickler`: the framework's cloudpickle (its
    function and module name: the ranks pickle their results with it)."""
    payload = dumps((fn, tuple(args), dict(kwargs or {}), pickler))
    addresses = machine_addresses(nics)
    bind = addresses[0] if nics and len(addresses) == 1 else "0.0.0.0"
    service = function_service.FunctionService(secret, payload, num_proc, bind, handlers)
    return service, service.endpoint(addresses)


def launch(service, targets, host_services, secret, start_timeout=600, env=None, stdout=None,
           stderr=None, verbose=1, nics=None, who="tf_ring"):
    """Runs the served function through tfringrun on `host_services`
    [(task service endpoint, slots)], one per real host, in the order
    ranks are placed; returns the results in rank order or raises JobFailed
    (`who` names the API in its message). Closes `service`."""
    num_proc = sum(slots for _, slots in host_services)
    hosts = [(HOST_NAME % i, s, k) for i, (s, k) in enumerate(host_services)]
    directory = AgentDirectory()
    try:
        directory.set_hosts(hosts)
        argv = launcher_argv(num_proc, [(n, k) for n, _, k in hosts], directory.agent,
                             start_timeout, nics, verbose, (env or {}).keys())
        rc = run_launcher(argv, secret, targets, env, stdout, stderr)
    finally:
        service.close()
        directory.close()
    return collect(service, num_proc, rc, who)


def run_launcher(argv, secret, targets, env=None, stdout=None, stderr=None):
    """Runs tfringrun (`argv`) with the job's secret and the function
    service's address in its environment; returns its exit code."""
    child_env = dict(os.environ, **dict(env or {}))
    child_env[frames.SECRET_ENV] = secret
    child_env[rank_entry.FUNCTION_ENV] = targets
    pipes = {"stdout": subprocess.PIPE if stdout else None,
             "stderr": subprocess.PIPE if stderr else None}
    proc = subprocess.Popen(argv, env=child_env, stdin=subprocess.DEVNULL, **pipes)
    pumps = [threading.Thread(target=_pump, args=(stream, out), daemon=True)
             for stream, out in ((proc.stdout, stdout), (proc.stderr, stderr)) if out]
    for pump in pumps:
        pump.start()
    rc = proc.wait()
    for pump in pumps:
        pump.join(timeout=10.0)
    return rc


def run_function(fn, args, kwargs, host_services, secret, dumps, pickler, nics=None, **launch_kw):
    """serve() and launch() in one, for callers that need no handlers."""
    num_proc = sum(slots for _, slots in host_services)
    service, targets = serve(fn, args, kwargs, num_proc, secret, dumps, pickler, nics)
    return launch(service, targets, host_services, secret, nics=nics, **launch_kw)


def collect(service, num_proc, rc, who):
    """The results in rank order, or JobFailed naming the ranks that failed."""
    if service.errors:
        first = min(service.errors)
        raise JobFailed("%s: rank %s failed (of %d ranks):\n%s" % (
            who, ", ".join(map(str, sorted(service.errors))), num_proc,
            service.errors[first].rstrip()), service.errors, rc)
    num_proc = service.world_size or num_proc  # an elastic job's last world may be smaller
    missing = [r for r in range(num_proc) if r not in service.results]
    if rc != 0 or missing:
        raise JobFailed("%s: the job failed (tfringrun exit code %d); ranks %s returned no result; "
                        "tfringrun's lines above say which rank or host failed first"
                        % (who, rc, ", ".join(map(str, missing)) or "none"), exit_code=rc)
    return [pickle.loads(service.results[r]) for r in range(num_proc)]
