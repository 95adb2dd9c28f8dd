"""tfringrun's elastic flags (--min-np, --host-discovery-script, ...): their
argparse group, and the ElasticSettings they make. Non-elastic jobs get
None, and never enter the driver."""
from tf_ring.plumbing.job_settings import RECOVERY_MODES, RECOVERY_RESTART, ElasticSettings

# ULFM needs the first two: without --with-ft a lost rank aborts the job, and
# with the shared-memory BTL a survivor can hang on the dead rank. The third
# keeps Open MPI's `han` collectives off: a shrunk world is often uneven
# (2 ranks on one host, 1 on the other), where han's MPI_Allreduce of 64 MB
# measured 75x slower than the default `tuned` one (docs/elastic.md).
IN_PROCESS_MPI_ARGS = ("--with-ft", "ulfm", "--mca", "btl", "tcp,self",
                       "--mca", "coll_han_priority", "0")

DEFAULT_DETECTION_TIMEOUT = 10.0  # in-process mode's (Open MPI's detector)
# Restart mode's (the launcher's beats). A silent host would otherwise hang
# the job until TCP gives up (many minutes); a healthy one wrongly declared
# lost costs a restart without it. On this 2-core VM whole-machine stalls
# under load silenced every rank for up to 44 s (docs/launching.md): 120 s
# stays well above that.
DEFAULT_RESTART_DETECTION_TIMEOUT = 120.0


def add_arguments(parser):
    group = parser.add_argument_group("elastic training (docs/elastic.md)")
    group.add_argument("--min-np", type=int, default=None, metavar="N",
                       help="run elastically: keep going while at least N ranks can run")
    group.add_argument("--max-np", type=int, default=None, metavar="N",
                       help="never run more than N ranks (default: all discovered slots)")
    group.add_argument("--host-discovery-script", default=None, metavar="SCRIPT",
                       help="prints the usable hosts, one `host` or `host:slots` a line")
    group.add_argument("--slots-per-host", type=int, default=1, metavar="K",
                       help="slots of a host the discovery script lists without a count")
    group.add_argument("--elastic-timeout", type=float, default=600.0, metavar="S",
                       help="how long to wait for --min-np slots before failing")
    group.add_argument("--reset-limit", type=int, default=None, metavar="R",
                       help="fail after R restarts")
    group.add_argument("--blacklist-cooldown-range", type=float, nargs=2, default=None,
                       metavar=("MIN", "MAX"), help="seconds a failed host stays out")
    group.add_argument("--recovery", choices=RECOVERY_MODES, default=RECOVERY_RESTART,
                       help="what a lost rank costs: 'restart' relaunches every rank from the "
                            "in-memory mirror; 'in-process' keeps the survivors' processes (MPI "
                            "ULFM: mpirun --with-ft ulfm, MPI over TCP between hosts). "
                            "Default: restart")
    group.add_argument("--warm-spares", action="store_true",
                       help="keep one process a slot ready on every host, TensorFlow and "
                            "tf_ring imported, to become a rank of the next world: a restart "
                            "then skips the import (about 0.6 GB of memory a spare; "
                            "docs/elastic.md)")
    group.add_argument("--detection-timeout", type=float, default=None, metavar="S",
                       help="a host silent for S seconds (its link down, the machine frozen) "
                            "is declared lost. --recovery in-process: Open MPI's heartbeat "
                            "detector (default 10). Otherwise the launcher hears a beat from "
                            "every rank's wrapper every S/3.5 s on mpirun's output and a "
                            "signed UDP beat every 0.5 s: an elastic job restarts without a "
                            "silent host (default 120), a plain one stops naming it (off "
                            "unless given). Both cross the job's network: on a saturated "
                            "link give a minute or more (docs/launching.md)")


def elastic_settings(namespace, np, host_list, error):
    """The ElasticSettings of the parsed flags, or None for a job that is
    not elastic. `error(text)` is the parser's."""
    if namespace.min_np is None and not namespace.host_discovery_script:
        if namespace.warm_spares:
            error("--warm-spares speeds up an elastic job's restarts: give --min-np or "
                  "--host-discovery-script too")
        return None
    if namespace.warm_spares and namespace.recovery != RECOVERY_RESTART:
        error("--warm-spares is for --recovery restart: in-process recovery keeps the "
              "survivors' processes, and a restart there happens only to grow")
    min_np = np if namespace.min_np is None else namespace.min_np
    if min_np < 1:
        error("--min-np must be at least 1")
    if namespace.max_np is not None and namespace.max_np < min_np:
        error("--max-np %d is below --min-np %d" % (namespace.max_np, min_np))
    if not namespace.host_discovery_script and not host_list:
        error("elastic runs need --host-discovery-script or a fixed -H/--hostfile list")
    if namespace.slots_per_host < 1:
        error("--slots-per-host must be at least 1")
    cooldown = namespace.blacklist_cooldown_range
    return ElasticSettings(
        min_np=min_np, max_np=namespace.max_np, discovery_script=namespace.host_discovery_script,
        slots_per_host=namespace.slots_per_host, elastic_timeout=namespace.elastic_timeout,
        reset_limit=namespace.reset_limit,
        blacklist_cooldown_range=tuple(cooldown) if cooldown is not None else None,
        recovery=namespace.recovery, warm_spares=namespace.warm_spares)


def job_changes(elastic, detection_timeout, mpi_args):
    """(detection_timeout, mpi_args) of an elastic job: restart mode's
    default timeout; in-process mode's ULFM arguments and failure detector."""
    if elastic is None:
        return detection_timeout, mpi_args
    if elastic.recovery == RECOVERY_RESTART:
        if detection_timeout is None:
            detection_timeout = DEFAULT_RESTART_DETECTION_TIMEOUT
        return detection_timeout, mpi_args
    detector = detector_arguments(detection_timeout or DEFAULT_DETECTION_TIMEOUT)
    return detection_timeout, " ".join([mpi_args, *IN_PROCESS_MPI_ARGS, *detector]).strip()


def detector_arguments(timeout):
    """Open MPI's heartbeat failure detector: without it a rank whose host
    goes silent (no closed socket) is never declared lost. Its period must be
    under a third of the timeout."""
    return ("--mca", "mpi_ft_detector", "true",
            "--mca", "mpi_ft_detector_timeout", "%g" % timeout,
            "--mca", "mpi_ft_detector_period", "%.3g" % (timeout / 3.5))
