"""What a tfringrun job runs with, as typed records: JobSettings (the whole
job, as the command line or a hosted job's caller gives it),
ElasticSettings (its elastic part) and WorldSettings (one world of an
elastic job: how many ranks on which hosts).

The launcher builds a JobSettings once from argparse (run/arguments.py) and
passes it down; the elastic driver makes a WorldSettings per world; a
hosted job (Spark, Ray) builds one and hands tfringrun its command line
(launcher_argv). Standard library only.
"""
import dataclasses
from typing import List, Mapping, Optional, Tuple

from tf_ring.plumbing.host_names import hosts_argument

RECOVERY_RESTART = "restart"
RECOVERY_IN_PROCESS = "in-process"
RECOVERY_MODES = (RECOVERY_RESTART, RECOVERY_IN_PROCESS)


@dataclasses.dataclass(frozen=True)
class ElasticSettings:
    """--min-np and the flags that only an elastic job takes (docs/elastic.md)."""
    min_np: int
    max_np: Optional[int] = None
    discovery_script: Optional[str] = None  # None: the fixed -H / --hostfile list
    slots_per_host: int = 1
    elastic_timeout: float = 600.0
    reset_limit: Optional[int] = None
    blacklist_cooldown_range: Optional[Tuple[float, float]] = None
    recovery: str = RECOVERY_RESTART
    warm_spares: bool = False


@dataclasses.dataclass(frozen=True)
class JobSettings:
    """A whole job. `host_list` [(host, slots)] is None for this machine alone;
    `engine_env` holds the TF_RING_* values of the engine flags given.
    hosts_source, prrte_settings and orte_warning are what the launcher found
    in its environment (a Slurm allocation, an MPI Operator pod)."""
    command: List[str]
    np: int
    host_list: Optional[List[Tuple[str, int]]] = None
    hosts_source: Optional[str] = None
    oversubscribe: bool = False
    network_interface: Optional[str] = None
    ssh_port: Optional[int] = None
    rsh_agent: Optional[str] = None
    start_timeout: float = 120.0
    bind_to: str = "none"
    mpi_args: str = ""
    engine_env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    detection_timeout: Optional[float] = None
    verbose: bool = False
    tf_logs: bool = False
    share_gpu: bool = False
    prrte_settings: Mapping[str, str] = dataclasses.field(default_factory=dict)
    orte_warning: Optional[str] = None
    elastic: Optional[ElasticSettings] = None

    @property
    def hosts(self):
        """mpirun's --host value, or None on this machine alone."""
        return hosts_argument(self.host_list) if self.host_list else None

    @property
    def is_elastic(self):
        return self.elastic is not None

    @property
    def in_process(self):
        """--recovery in-process: the survivors of a loss keep their processes."""
        return self.elastic is not None and self.elastic.recovery == RECOVERY_IN_PROCESS

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True)
class WorldSettings:
    """One mpirun's worth of a job: all of a plain job, or one world of an
    elastic one. `control` is the elastic driver's control service, which
    knows the world's size after an in-process shrink (None outside it)."""
    job: JobSettings
    np: int
    host_list: Optional[List[Tuple[str, int]]]
    control: object = None

    @classmethod
    def whole(cls, job):
        """The world of a job that is not elastic: all its ranks on all its hosts."""
        return cls(job, job.np, job.host_list)

    @property
    def hosts(self):
        return hosts_argument(self.host_list) if self.host_list else None

    @property
    def shrunk_size(self):
        """The world's size after its last in-process shrink, as rank 0 told
        the driver's control service; None when it never shrank."""
        return self.control.world_size if self.control is not None else None

    @property
    def shrunk_survivors(self):
        """The ranks the world's in-process shrinks kept; None when it never shrank."""
        return self.control.survivors if self.control is not None else None


def launcher_argv(job):
    """tfringrun's flags and command for `job` (what a hosted job runs):
    parsing them gives `job` back (tests/unit/test_launcher.py). What the launcher
    finds in its own environment (hosts_source, prrte_settings, orte_warning)
    it finds again there; engine_env has no flags here (hosted jobs pass
    engine settings in the ranks' environment)."""
    if job.engine_env:
        raise ValueError("launcher_argv: pass the engine's settings %s in the job's "
                         "environment" % ", ".join(sorted(job.engine_env)))
    argv = ["-np", str(job.np)]
    if job.host_list:
        argv += ["-H", job.hosts]
    for flag, value, default in (
            ("--network-interface", job.network_interface, None),
            ("--ssh-port", job.ssh_port, None), ("--rsh-agent", job.rsh_agent, None),
            ("--start-timeout", job.start_timeout, 120.0), ("--bind-to", job.bind_to, "none"),
            ("--mpi-args", job.mpi_args, ""), ("--detection-timeout", job.detection_timeout, None)):
        if value != default:
            argv += [flag, _text(value)]
    for flag, on in (("--oversubscribe", job.oversubscribe), ("--verbose", job.verbose),
                     ("--tf-logs", job.tf_logs), ("--share-gpu", job.share_gpu)):
        if on:
            argv.append(flag)
    if job.elastic is not None:
        argv += _elastic_argv(job.elastic)
    return argv + ["--"] + list(job.command)


def _elastic_argv(elastic):
    argv = ["--min-np", str(elastic.min_np)]
    for flag, value, default in (
            ("--max-np", elastic.max_np, None),
            ("--host-discovery-script", elastic.discovery_script, None),
            ("--slots-per-host", elastic.slots_per_host, 1),
            ("--elastic-timeout", elastic.elastic_timeout, 600.0),
            ("--reset-limit", elastic.reset_limit, None),
            ("--recovery", elastic.recovery, RECOVERY_RESTART)):
        if value != default:
            argv += [flag, _text(value)]
    cooldown = elastic.blacklist_cooldown_range
    if cooldown is not None:
        argv += ["--blacklist-cooldown-range"] + [_text(v) for v in cooldown]
    if elastic.warm_spares:
        argv.append("--warm-spares")
    return argv


def _text(value):
    return "%r" % value if isinstance(value, float) else str(value)
