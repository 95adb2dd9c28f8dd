"""Issue 47's attacks on the channels that start with the job's handshake
(the elastic control service, a hosted job's task and function services),
by someone who knows the wire but not the secret: another user (`nobody`,
through setpriv, where this runs as root) or else an unauthenticated peer
on loopback, running tests/unit/channel_attacker.py. Each attack is refused,
counted, and nothing of it is acted on; the job's own clients go on."""
import json
import os
import pickle
import shutil
import socket
import subprocess
import sys
import threading
import time

import cloudpickle
import pytest

from tf_ring.elastic import control_client
from tf_ring.hosted import frames, function_service, job, task_service
from tf_ring.plumbing import handshake
from tf_ring.elastic_driver.control_service import ControlService

HERE = os.path.dirname(os.path.abspath(__file__))
ATTACKER = os.path.join(HERE, "channel_attacker.py")
AS_NOBODY = os.geteuid() == 0 and shutil.which("setpriv") is not None
PREFIX = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"] if AS_NOBODY else []
SECRET = "c0ffee" * 5
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the ranks cannot import this file


def attacker(*args):
    """The attacker's process (as nobody where possible), its stdout a pipe."""
    return subprocess.Popen(PREFIX + [sys.executable, ATTACKER] + [str(a) for a in args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd="/")


def relay_port(proc):
    line = proc.stdout.readline()
    assert line.startswith("PORT "), line + proc.stderr.read()
    return int(line.split()[1])


def finish(proc):
    out, err = proc.communicate(timeout=30)
    assert "DONE" in out or "HELD" in out or "CLOSED" in out, out + err
    return out


def through(endpoint, port):
    """`endpoint` with its port changed: where a client falls through to."""
    return "%s:%d" % (endpoint.rpartition(":")[0], port)


def wait_for(condition, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline and not condition():
        time.sleep(0.05)
    return condition()


class Exploit:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, ("touch %s" % self.marker,))


# -- the relay: a proof forwarded, then frames of the attacker's own -----------

def test_control_relay_cannot_report_a_commit():
    service = ControlService(SECRET, ["127.0.0.1"])
    proc = attacker("relay", service.port, json.dumps({"op": "committed", "commit": 999}))
    try:
        env = service.environment()
        env = {k: through(v, relay_port(proc)) for k, v in env.items()}
        client = control_client.from_environment(dict(env, TF_RING_ELASTIC_SECRET=SECRET))
        client.report_commit(3)  # its connection is dropped under it; the rank trains on
        client.close()
        out = finish(proc)
        assert service.committed != 999 and "GOT 0 bytes" in out, out
        assert service.refused >= 1
    finally:
        service.close()


def test_task_service_relay_runs_no_command_of_the_attackers(tmp_path):
    service = task_service.TaskService(SECRET, "127.0.0.1")
    marker = tmp_path / "attacker-ran"
    os.chmod(tmp_path, 0o777)
    proc = attacker("relay", service.port, json.dumps({"run": "touch %s" % marker, "env": {}}))
    try:
        agent = _agent(tmp_path, through(service.endpoint(["127.0.0.1"]), relay_port(proc)),
                       ["echo", "the-agents-own"])
        agent.communicate(timeout=30)
        finish(proc)
        time.sleep(0.5)
        assert not marker.exists()
        assert service.commands_run == 0 and service._server.refused >= 1
    finally:
        service.close()


def test_a_proof_relayed_to_another_task_service_is_refused(tmp_path):
    meant, other = (task_service.TaskService(SECRET, "127.0.0.1") for _ in range(2))
    proc = attacker("relay", other.port, json.dumps({}))
    try:
        agent = _agent(tmp_path, through(meant.endpoint(["127.0.0.1"]), relay_port(proc)),
                       ["echo", "ran-on-the-wrong-host"])
        out, err = agent.communicate(timeout=30)
        finish(proc)
        assert agent.returncode == 255 and b"ran-on-the-wrong-host" not in out, err
        assert other.commands_run == 0 and other._server.refused == 1
    finally:
        meant.close()
        other.close()


def test_function_service_relay_gets_no_payload_and_plants_no_result(tmp_path):
    marker = tmp_path / "unpickled"
    service = function_service.FunctionService(
        SECRET, cloudpickle.dumps((_forty_two, (), {}, "cloudpickle")), 1, "127.0.0.1")
    planted = pickle.dumps(Exploit(str(marker))).hex()
    injected = {"op": "result", "rank": 0, "size": 1, "world": 5, "ok": True}
    proc = attacker("relay", service.port, json.dumps(injected), planted)
    try:
        rank = _rank(through(service.endpoint(["127.0.0.1"]), relay_port(proc)))
        out = finish(proc)
        rank.communicate(timeout=60)
        assert "GOT 0 bytes" in out, out  # not even the function's payload
        assert service.world == 0 and service.results == {}
        assert service.refused >= 1 and not marker.exists()
    finally:
        service.close()
    # The job then fails for want of rank 0's result, unpickling nothing.
    with pytest.raises(job.JobFailed):
        job.collect(service, 1, 0, "test")
    assert not marker.exists()


def test_function_service_relay_cannot_fetch_the_function():
    service = function_service.FunctionService(SECRET, b"the pickled function" * 100, 1,
                                               "127.0.0.1")
    proc = attacker("relay", service.port, json.dumps({"op": "fn", "rank": 0, "size": 1}))
    try:
        rank = _rank(through(service.endpoint(["127.0.0.1"]), relay_port(proc)))
        out = finish(proc)
        rank.communicate(timeout=60)
        assert "GOT 0 bytes" in out, out
        assert service.refused >= 1
    finally:
        service.close()


def _forty_two():
    return 42


def _agent(tmp_path, endpoint, command):
    hosts = tmp_path / "hosts.json"
    hosts.write_text(json.dumps({"tfring-host-0": endpoint}))
    env = dict(os.environ, **{frames.SECRET_ENV: SECRET})
    return subprocess.Popen([sys.executable, "-m", "tf_ring.hosted.rsh_agent", "--hosts",
                             str(hosts), "tfring-host-0"] + command, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _rank(endpoint):
    env = dict(os.environ, OMPI_COMM_WORLD_RANK="0", OMPI_COMM_WORLD_SIZE="1",
               **{frames.SECRET_ENV: SECRET, "TF_RING_HOSTED_FUNCTION": endpoint})
    return subprocess.Popen([sys.executable, "-m", "tf_ring.hosted.rank_entry"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


# -- bounded handshakes --------------------------------------------------------

def test_a_dribbled_handshake_ends_at_its_deadline(monkeypatch):
    monkeypatch.setattr(handshake, "HANDSHAKE_TIMEOUT_S", 1.0)
    service = ControlService(SECRET, ["127.0.0.1"])
    try:
        out = finish(attacker("dribble", service.port, 4))  # a byte every 0.2 s for 4 s
        held = float(out.split("HELD")[1])
        assert held < 2.5, out  # one deadline for the handshake, not one per read
        assert wait_for(lambda: service.refused == 1)
    finally:
        service.close()


def test_a_flood_of_silent_connections_holds_a_bounded_number_of_threads():
    service = ControlService(SECRET, ["127.0.0.1"])
    before = threading.active_count()
    try:
        proc = attacker("flood", service.port, 80, 2)
        peak = before
        deadline = time.time() + 2.5
        while time.time() < deadline:
            peak = max(peak, threading.active_count())
            time.sleep(0.01)
        # The job's own client gets through while the flood holds its connections.
        client = control_client.from_environment(dict(service.environment(),
                                                      TF_RING_ELASTIC_SECRET=SECRET))
        client.report_commit(4)
        client.close()
        out = finish(proc)
        assert service.committed == 4
        assert peak - before <= 40, (peak, before)  # 32 waiting to prove, not 80
        assert int(out.split("CLOSED")[1]) >= 80 - 32, out
    finally:
        service.close()


def test_the_accept_loop_outlives_failed_thread_starts(monkeypatch):
    service = ControlService(SECRET, ["127.0.0.1"])
    failures = []
    real_start = threading.Thread.start

    def start(thread):
        if thread.name != "tfringrun-control" and len(failures) < 3 and "_run" in repr(
                getattr(thread, "_target", "")):
            failures.append(thread)
            raise RuntimeError("can't start new thread")
        return real_start(thread)
    try:
        monkeypatch.setattr(threading.Thread, "start", start)
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", service.port), timeout=5) as sock:
                assert sock.recv(1) == b""  # dropped: no thread to serve it
        monkeypatch.undo()
        client = control_client.from_environment(dict(service.environment(),
                                                      TF_RING_ELASTIC_SECRET=SECRET))
        client.report_commit(2)
        client.close()
        assert service.committed == 2 and service.refused == 3 and len(failures) == 3
    finally:
        service.close()


@pytest.mark.skipif(not AS_NOBODY, reason="a process limit needs another user (root runs this)")
def test_a_process_limit_does_not_kill_the_listener():
    """As nobody with RLIMIT_NPROC of 1, no thread can start: the service
    drops the connections it cannot serve and serves once threads can start."""
    code = (
        "import resource, socket, time\n"
        "from tf_ring.elastic_driver.control_service import ControlService\n"
        "from tf_ring.elastic import control_client\n"
        "s = ControlService('k', ['127.0.0.1'])\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)\n"
        "resource.setrlimit(resource.RLIMIT_NPROC, (1, hard))\n"
        "for _ in range(3):\n"
        "    c = socket.create_connection(('127.0.0.1', s.port), timeout=5)\n"
        "    print('DROPPED', c.recv(1) == b'')\n"
        "resource.setrlimit(resource.RLIMIT_NPROC, (soft, hard))\n"
        "client = control_client.from_environment(dict(s.environment(), "
        "TF_RING_ELASTIC_SECRET='k'))\n"
        "client.report_commit(5)\n"
        "print('COMMITTED', s.committed, 'REFUSED', s.refused)\n")
    out = subprocess.run(PREFIX + [sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd="/", env=dict(os.environ, PYTHONPATH=_repo()))
    assert out.stdout.count("DROPPED True") == 3, out.stdout + out.stderr
    assert "COMMITTED 5 REFUSED 3" in out.stdout, out.stdout + out.stderr


def _repo():
    return os.path.dirname(os.path.dirname(HERE))
