"""Stops the Open MPI daemons a failed start left on other hosts.

When the agent (ssh) reaches a host but the daemon it starts there cannot
connect back to mpirun (a firewall, the job's network interface down), mpirun
gives up on that host and exits, while the daemon may keep waiting for it
forever. The agent that started the daemon can still reach the host, so the
launcher uses it once more to stop what this job left there.
"""
import shlex
import subprocess
import time

from tf_ring.plumbing import host_agent

# Each agent gets this long; a host that cannot be reached at all is left alone.
AGENT_TIMEOUT_S = 5.0


def daemon_pattern(mpirun_pid):
    """A `pkill -f` pattern for this job's daemons only. PRRTE names the job
    prterun-<host>-<mpirun pid>@N and passes that name to every daemon; the
    bracket keeps the pattern from matching the remote shell running pkill."""
    digits = str(mpirun_pid)
    return "prterun-.*-%s[%s]@" % (digits[:-1], digits[-1])


def stop_orphaned_daemons(hosts, mpirun_pid, rsh_agent=None, ssh_port=None,
                          timeout=AGENT_TIMEOUT_S):
    """Kills this job's daemons on `hosts`, all in parallel, within `timeout`."""
    remote = "pkill -KILL -f %s" % shlex.quote(daemon_pattern(mpirun_pid))
    agents = []
    for host in hosts:
        if host_agent.is_this_machine(host):
            continue  # mpirun started no agent here
        try:
            agents.append(subprocess.Popen(
                host_agent.agent_argv(host, remote, rsh_agent, ssh_port, AGENT_TIMEOUT_S), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        except OSError:
            pass  # no agent to run: nothing more the launcher can do there
    deadline = time.time() + timeout
    for agent in agents:
        try:
            agent.wait(timeout=max(0.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait()
