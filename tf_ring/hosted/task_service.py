"""The command service a framework task runs on its host (a Spark barrier
task, a Ray actor): the job's rsh agent asks it to start Open MPI's daemon
there, as ssh would. The daemon's output goes back to the agent; when the
agent's connection drops (mpirun ended it), the daemon and everything it
started is killed, so nothing outlives the job on the host."""
import os
import subprocess
import sys
import threading

from tf_ring.hosted import frames, server
from tf_ring.plumbing.sealed_frames import ChannelError, PeerClosed
from tf_ring.plumbing import env_names, process_tree

OUT, ERR = b"o", b"e"
# What the agent may set for the daemon: Open MPI's and PRRTE's settings and
# root's permission, which mpirun's own environment holds (ssh does not
# carry the environment either; mpirun passes the rest itself).
FORWARDED_PREFIXES = ("OMPI_MCA_", "PRTE_MCA_", "PMIX_MCA_", "OMPI_ALLOW_RUN_AS_ROOT")
# The daemon's ranks start this Python (the task's own, which may differ
# from the driver's) through tf_ring.hosted.job's rank command.
PYTHON_ENV = env_names.TASK_PYTHON
# Connections served at once: mpirun runs one daemon per host and job (an
# elastic job's next world may start before the last one's agent left).
MAX_AGENTS = 16


class TaskService:
    def __init__(self, secret, bind_address="0.0.0.0"):
        self.commands_run = 0
        self._children, self._lock = [], threading.Lock()
        self._closed = False
        self._server = server.Server(secret, frames.TASK, self._serve, bind_address,
                                     name="tf_ring-task", max_proven=MAX_AGENTS)

    @property
    def port(self):
        return self._server.port

    @property
    def service_id(self):
        return self._server.service_id

    def endpoint(self, addresses):
        """What the rsh agent is told to reach this service (its addresses here)."""
        return self._server.endpoint(addresses)

    def close(self):
        """Stops listening and kills every daemon still running."""
        self._closed = True
        self._server.close()
        with self._lock:
            children = list(self._children)
        for child in children:
            process_tree.kill_tree(child.pid)

    def _serve(self, channel):
        request = channel.receive()
        command, settings = request.get("run"), request.get("env", {})
        if not isinstance(command, str) or not isinstance(settings, dict):
            raise ChannelError("a run request needs a command string and an env object")
        env = dict(os.environ)
        for key, value in settings.items():
            if not (isinstance(key, str) and key.startswith(FORWARDED_PREFIXES)
                    and isinstance(value, str)):
                raise ChannelError("env %r may not be set through the agent" % (key,))
            env[key] = value
        env[PYTHON_ENV] = sys.executable
        with self._lock:
            if self._closed:
                return
            child = subprocess.Popen(["/bin/sh", "-c", command], env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     start_new_session=True)
            self._children.append(child)
            self.commands_run += 1
        relays = [threading.Thread(target=_relay, args=(stream, kind, channel), daemon=True)
                  for stream, kind in ((child.stdout, OUT), (child.stderr, ERR))]
        for relay in relays:
            relay.start()
        threading.Thread(target=_kill_when_dropped, args=(channel, child), daemon=True).start()
        rc = child.wait()
        for relay in relays:
            relay.join(timeout=5.0)
        with self._lock:
            self._children.remove(child)
        channel.send({"exit": rc})


def _relay(stream, kind, channel):
    try:
        for chunk in iter(lambda: os.read(stream.fileno(), 65536), b""):
            channel.send_frame(kind, chunk)
    except OSError:
        pass  # the agent went away; _kill_when_dropped ends the daemon


def _kill_when_dropped(channel, child):
    """The agent sends nothing more but heartbeats: a read ends only when it
    drops, breaks the protocol, or goes silent (frozen: channel_beats)."""
    try:
        while True:
            channel.receive_frame()
    except (PeerClosed, ChannelError, OSError):
        pass
    if child.poll() is None:
        process_tree.kill_tree(child.pid)
