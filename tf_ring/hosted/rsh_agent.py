"""The rsh agent of a hosted job: mpirun runs `rsh_agent HOST COMMAND...`
as it would run ssh, and the agent has HOST's task service (task_service)
run COMMAND there, relaying its output and exit code.

    python -m tf_ring.hosted.rsh_agent --hosts FILE [ssh options] HOST COMMAND...

FILE (written by tf_ring.hosted.job in a private directory) maps each
made-up host name to its task service's endpoint. The job's
secret comes in the environment (frames.SECRET_ENV), never on a command line."""
import json
import os
import sys

from tf_ring.hosted import frames, task_service
from tf_ring.plumbing.sealed_frames import ChannelError, parse_json

# ssh options that take a value (mpirun may add some of its plm_rsh_args).
_SSH_OPTIONS_WITH_VALUE = ("-p", "-l", "-o", "-i", "-F", "-b", "-c", "-E", "-J", "-m")
_FAILED = 255  # ssh's code for "could not reach the host"


class AgentFailed(Exception):
    """The agent's own failure (not the command's): it exits 255, as ssh does."""


def split_argv(argv):
    """(hosts file, host, command words) from the agent's arguments."""
    if len(argv) < 2 or argv[0] != "--hosts":
        raise AgentFailed("usage: rsh_agent --hosts FILE [ssh options] HOST COMMAND...")
    hosts_file, rest = argv[1], list(argv[2:])
    while rest and rest[0].startswith("-"):
        rest = rest[2:] if rest[0] in _SSH_OPTIONS_WITH_VALUE else rest[1:]
    if len(rest) < 2:
        raise AgentFailed("no host or no command in %r" % (argv,))
    return hosts_file, rest[0], rest[1:]


def daemon_environment(environ):
    return {k: v for k, v in environ.items() if k.startswith(task_service.FORWARDED_PREFIXES)}


def main(argv=None):
    """The command's exit code, or 255 for the agent's own failure (bad
    arguments, no host map, the task service unreachable, lost or silent),
    which Open MPI reads as ssh's "could not reach the host"."""
    try:
        return _run(sys.argv[1:] if argv is None else argv)
    except AgentFailed as e:
        print("tf_ring rsh agent: %s" % e, file=sys.stderr)
    except Exception as e:  # noqa: B902 - whatever broke here, it was not the command
        print("tf_ring rsh agent failed: %s: %s" % (type(e).__name__, e), file=sys.stderr)
    return _FAILED


def _run(argv):
    hosts_file, host, command = split_argv(argv)
    try:
        with open(hosts_file) as f:
            services = json.load(f)
    except (OSError, ValueError) as e:
        raise AgentFailed("cannot read the host map %s: %s" % (hosts_file, e))
    if not isinstance(services, dict) or host not in services:
        raise AgentFailed("%r is not a host of this job (%s)" % (
            host, ", ".join(services) if isinstance(services, dict) else "no host map"))
    if frames.SECRET_ENV not in os.environ:
        raise AgentFailed("%s is not set: the job's secret comes in the environment"
                          % frames.SECRET_ENV)
    try:
        channel = frames.connect(services[host], os.environ[frames.SECRET_ENV], frames.TASK)
    except ChannelError as e:
        raise AgentFailed("cannot reach the task service of %s: %s" % (host, e))
    # ssh hands the remote shell the words joined by spaces; mpirun quotes for that.
    channel.send({"run": " ".join(command), "env": daemon_environment(os.environ)})
    outputs = {task_service.OUT: sys.stdout.buffer, task_service.ERR: sys.stderr.buffer}
    try:
        while True:
            kind, payload = channel.receive_frame()
            if kind in outputs:
                outputs[kind].write(payload)
                outputs[kind].flush()
            elif kind == frames.JSON:
                return _exit_code(parse_json(payload).get("exit"))
    except (ChannelError, OSError) as e:
        raise AgentFailed("lost %s's task service: %s" % (host, e))


def _exit_code(rc):
    """The daemon's code as a shell reports it (128 + N for signal N)."""
    if not isinstance(rc, int) or isinstance(rc, bool):
        return _FAILED
    return 128 - rc if rc < 0 else rc


if __name__ == "__main__":
    sys.exit(main())
