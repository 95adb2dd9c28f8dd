"""Running a command on another host the way mpirun reaches it: through its
agent, ssh unless tfringrun got --rsh-agent. The launcher stops a failed
start's orphaned daemons this way (run/orphan_daemons), and the elastic
driver starts warm spares on a host discovery added
(elastic_driver/spare_seeding)."""
import shlex
import socket


def end_of_options(agent):
    """["--"] after an ssh or rsh agent's own options, so nothing after it
    is read as one; [] for another --rsh-agent program, which may not know
    "--" (mpirun calls it as AGENT HOST COMMAND): validated names never
    start with '-' there."""
    return ["--"] if agent and agent[0].rsplit("/", 1)[-1] in ("ssh", "rsh") else []


def agent_argv(host, command, rsh_agent=None, ssh_port=None, connect_timeout=None):
    """The argv that runs `command` (one shell string) on `host`: the
    --rsh-agent, else ssh in batch mode (never waiting for a password nobody
    types), on `ssh_port`, giving up connecting after `connect_timeout` s."""
    if rsh_agent:
        agent = shlex.split(rsh_agent)
    else:
        agent = ["ssh", "-o", "BatchMode=yes"]
        if connect_timeout is not None:
            agent += ["-o", "ConnectTimeout=%d" % connect_timeout]
        if ssh_port is not None:
            agent += ["-p", str(ssh_port)]
    return agent + end_of_options(agent) + [host, command]


def is_this_machine(host):
    """Whether mpirun runs `host`'s ranks here, with no agent."""
    name = socket.gethostname()
    return host in ("localhost", "127.0.0.1", name, name.split(".")[0])
