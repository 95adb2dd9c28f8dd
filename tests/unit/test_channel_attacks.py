"""Issue 47's attacks on the channels that start with the job's handshake
(the elastic control service, a hosted job's task and function services),
by someone who knows the wire but not the secret: another user (`nobody`,
through setpriv, where this runs as root) or else an unauthenticated peer
on loopback, running tests/unit/channel_attacker.py. Each attack is refused,
counted, and nothing of it is acted on; the job's own clients go on.
Issue 58: junk after a relayed proof costs a service at most a piece (about
1 MiB) per connection, a service serves a bounded number of proven
connections, broken frames and failed accepts are counted and logged, and
the rsh agent's own failures exit 255."""
import json
import os
import pickle
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time

import cloudpickle
import pytest

from tf_ring.elastic import control_client
from tf_ring.elastic_driver import control_service
from tf_ring.elastic_driver.control_service import ControlService
from tf_ring.hosted import frames, function_service, job, task_service
from tf_ring.plumbing import channel_beats, handshake, sealed_frames
from tf_ring.plumbing.sealed_frames import PeerClosed

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


# -- issue 58: what junk after the proof costs, and what is counted -------------

def _proven(endpoint, label, limit=1 << 20):
    """A raw socket in the relay's place after a real client's handshake: the
    service holds a proven connection, and what comes next is junk."""
    channel = handshake.connect(endpoint, SECRET, label, limit, 5)
    channel_beats.BEATER.remove(channel)  # nothing of ours goes out on it any more
    return channel.sock


def _rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def test_junk_after_the_proof_costs_a_service_at_most_a_piece_per_connection():
    """8 connections announce 2 GiB and send 16 MiB each, 8 more a frame of
    exactly one piece and then hold it almost full: the function service
    (in its own process, as on the driver) grows by about a piece for each
    of the latter, nothing for the former."""
    service = subprocess.Popen([sys.executable, os.path.join(HERE, "frozen_party.py"),
                                "function-service", "1"], stdout=subprocess.PIPE, text=True,
                               env=dict(os.environ, TF_RING_HOSTED_SECRET=SECRET,
                                        PYTHONPATH=_repo()))
    socks = []
    try:
        endpoint = service.stdout.readline().split()[1]
        socks = [_proven(endpoint, frames.FUNCTION) for _ in range(16)]
        time.sleep(0.5)
        before = _rss_kib(service.pid)
        junk = os.urandom(1 << 20)
        for sock in socks[:8]:
            sock.sendall(struct.pack(">cIQ", b"r", (1 << 31) - 1, 0))
            try:
                for _ in range(16):
                    sock.sendall(junk)
            except OSError:
                pass  # dropped at the announcement
        held = sealed_frames.PIECE - (64 << 10)
        for sock in socks[8:]:
            sock.sendall(struct.pack(">cIQ", b"r", sealed_frames.PIECE, 0) + junk[:held])
        time.sleep(1.0)
        grown = _rss_kib(service.pid) - before
        assert grown < 8 * 1024 + 8 * 1024, "grew by %d KiB" % grown  # 8 pieces, and slack
        for sock in socks[:8]:
            sock.settimeout(5)
            assert _closed_by_peer(sock)
    finally:
        for sock in socks:
            sock.close()
        service.kill()
        service.wait()


def _closed_by_peer(sock):
    try:
        while sock.recv(1 << 16):
            pass
        return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_broken_frames_after_the_proof_are_counted_and_logged(caplog, tmp_path):
    caplog.set_level("WARNING", logger="tf_ring.channels")
    control = ControlService(SECRET, ["127.0.0.1"])
    tasks = task_service.TaskService(SECRET, "127.0.0.1")
    pidfile = tmp_path / "daemon.pid"
    try:
        # A frame cut short (the connection ends inside it).
        sock = _proven(control.environment()["TF_RING_CONTROL_TO"], "control", 1 << 16)
        sock.sendall(struct.pack(">cIQ", b"j", 40, 1) + b"{")
        sock.shutdown(socket.SHUT_WR)
        assert wait_for(lambda: control._server.refusals.reasons["truncated"] == 1)
        # A wrong MAC after a real run request: refused, counted, and the daemon killed.
        channel = frames.connect(tasks.endpoint(["127.0.0.1"]), SECRET, frames.TASK)
        channel_beats.BEATER.remove(channel)
        channel.send({"run": "echo $$ > %s; exec sleep 60" % pidfile, "env": {}})
        assert wait_for(lambda: pidfile.exists() and pidfile.read_text().strip())
        channel.sock.sendall(attacker_frame(b"j", b"{}", 2))
        assert wait_for(lambda: tasks._server.refusals.reasons["mac"] == 1)
        assert wait_for(lambda: tasks.commands_run == 1 and not tasks._children)
        channel.close()
        logged = caplog.text
        assert "a truncated frame" in logged and "MAC is wrong" in logged, logged
        assert control.refused == 1 and tasks._server.refused == 1
    finally:
        control.close()
        tasks.close()
        try:
            os.kill(int(pidfile.read_text()), 9)
        except (OSError, ValueError):
            pass


def attacker_frame(kind, payload, seq):
    """A sealed frame as the relay makes it: the next number, a MAC without the secret."""
    head = struct.pack(">cIQ", kind, len(payload), seq)
    return head + payload + b"\0" * 32


def test_a_failed_accept_is_counted_and_logged(caplog):
    caplog.set_level("WARNING", logger="tf_ring.channels")
    service = ControlService(SECRET, ["127.0.0.1"])
    listener = service._server._listener

    class Failing:
        """The listening socket, but out of file descriptors once."""
        def __init__(self, real):
            self.real, self.failed = real, False

        def accept(self):
            if not self.failed:
                self.failed = True
                raise OSError(24, "Too many open files")
            return self.real.accept()

        def __getattr__(self, name):
            return getattr(self.real, name)
    try:
        listener._sock = Failing(listener._sock)
        client = control_client.from_environment(dict(service.environment(),
                                                      TF_RING_ELASTIC_SECRET=SECRET))
        client.report_commit(1)  # accepted by the real accept(), now waiting
        client.report_commit(2)
        assert wait_for(lambda: service._server.refusals.reasons["accept"] == 1)
        client.close()
        client = control_client.from_environment(dict(service.environment(),
                                                      TF_RING_ELASTIC_SECRET=SECRET))
        client.report_commit(3)  # the loop went on
        client.close()
        assert service.committed == 3 and "accept failed" in caplog.text
    finally:
        service.close()


def test_a_service_serves_a_bounded_number_of_proven_connections():
    service = ControlService(SECRET, ["127.0.0.1"])
    endpoint = service.environment()["TF_RING_CONTROL_TO"]
    held = []
    try:
        for _ in range(control_service.MAX_CLIENTS):
            held.append(handshake.connect(endpoint, SECRET, "control", 1 << 16, 5))
            held[-1].send({"op": "notices", "since": 0})
            held[-1].receive()
        one_more = handshake.connect(endpoint, SECRET, "control", 1 << 16, 5)
        with pytest.raises(PeerClosed):
            one_more.receive()
        assert wait_for(lambda: service._server.refusals.reasons["proven cap"] == 1)
        held.pop().close()
        assert wait_for(lambda: service._server.proven < control_service.MAX_CLIENTS)
        client = control_client.from_environment(dict(service.environment(),
                                                      TF_RING_ELASTIC_SECRET=SECRET))
        client.report_commit(7)  # a place came free: served again
        client.close()
        assert service.committed == 7
    finally:
        for channel in held:
            channel.close()
        service.close()


@pytest.mark.parametrize("argv, env, why", [
    (["--hosts"], {}, "usage"),
    (["--hosts", "/nonexistent/hosts.json", "h", "true"], {}, "cannot read the host map"),
    (["--hosts", "HOSTS", "elsewhere", "true"], {}, "not a host of this job"),
    (["--hosts", "HOSTS", "tfring-host-0", "true"], {frames.SECRET_ENV: None}, "is not set"),
    (["--hosts", "HOSTS", "tfring-host-0", "true"], {}, "cannot reach the task service")])
def test_the_rsh_agent_exits_255_on_its_own_failures(tmp_path, argv, env, why):
    """ssh's convention, which Open MPI reads as "could not reach the host"."""
    hosts = tmp_path / "hosts.json"
    hosts.write_text(json.dumps({"tfring-host-0": "%s.%s@127.0.0.1:1" % ("0" * 32, "f" * 16)}))
    child_env = dict(os.environ, **{frames.SECRET_ENV: SECRET})
    for key, value in env.items():
        child_env.pop(key, None) if value is None else child_env.update({key: value})
    run = subprocess.run([sys.executable, "-m", "tf_ring.hosted.rsh_agent"]
                         + [str(hosts) if a == "HOSTS" else a for a in argv],
                         env=child_env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 255 and why in run.stderr, run.stderr
