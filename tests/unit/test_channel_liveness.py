"""Issue 58: a peer that completed the handshake and then froze (SIGSTOP, as
a hung process or host would) is dropped within the channel timeout on
every sealed channel, by whichever side waits for it, and its resources go
(the task service's daemon is killed); a peer that is only quiet (a long
function, a command that prints nothing, rank 0 between commits) is never
cut. Every party is a real process; TF_RING_CHANNEL_TIMEOUT_S is set short
here (TIMEOUT_S) for the services in this process and the processes it
starts alike."""
import os
import signal
import subprocess
import sys
import threading
import time

import cloudpickle
import pytest

from tf_ring.elastic import control_client
from tf_ring.elastic_driver.control_service import ControlService
from tf_ring.hosted import frames, function_service, task_service
from tf_ring.plumbing import channel_beats, handshake

HERE = os.path.dirname(os.path.abspath(__file__))
PARTY = os.path.join(HERE, "frozen_party.py")
SECRET = "f00d" * 8
TIMEOUT_S = 1.5
# From the freeze to the drop: the timeout, less the beat interval the last
# beat may have come before the freeze, plus time for a loaded machine.
EARLIEST_S, LATEST_S = TIMEOUT_S - TIMEOUT_S / 3 - 0.2, TIMEOUT_S + 3.0
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the ranks cannot import this file


@pytest.fixture
def processes(monkeypatch):
    """Short channel timeouts here and in every child; the children started
    through it are resumed and killed at the end, whatever happened."""
    monkeypatch.setenv(channel_beats.TIMEOUT_ENV, str(TIMEOUT_S))
    monkeypatch.setenv(frames.SECRET_ENV, SECRET)
    monkeypatch.setattr(handshake, "HANDSHAKE_TIMEOUT_S", 1.0)  # here; the children keep 5 s
    started, daemons = [], []
    yield started, daemons
    for proc in started:
        for sig in (signal.SIGKILL, signal.SIGCONT):
            try:
                os.kill(proc.pid, sig)
            except ProcessLookupError:
                pass
        proc.wait(timeout=10)
    for pidfile in daemons:
        _kill_daemon(pidfile)


def _kill_daemon(pidfile):
    try:
        os.kill(int(open(pidfile).read()), signal.SIGKILL)
    except (OSError, ValueError):
        pass


def start(processes, argv, **env):
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=_repo(), **env))
    processes[0].append(proc)
    return proc


def party(processes, *args):
    """A service in a process of its own (frozen_party.py): it, and its endpoint."""
    proc = start(processes, [sys.executable, PARTY] + [str(a) for a in args])
    line = proc.stdout.readline()
    assert line.startswith("ENDPOINT "), line + proc.stderr.read()
    return proc, line.split()[1]


def agent(processes, tmp_path, endpoint, command):
    hosts = tmp_path / "hosts.json"
    hosts.write_text('{"tfring-host-0": "%s"}' % endpoint)
    return start(processes, [sys.executable, "-m", "tf_ring.hosted.rsh_agent", "--hosts",
                             str(hosts), "tfring-host-0"] + command)


def rank(processes, endpoint):
    return start(processes, [sys.executable, "-m", "tf_ring.hosted.rank_entry"],
                 TF_RING_HOSTED_FUNCTION=endpoint)


def freeze(proc):
    os.kill(proc.pid, signal.SIGSTOP)
    return time.monotonic()


def wait_for(condition, timeout=LATEST_S + 5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not condition():
        time.sleep(0.02)
    return condition()


def assert_within_bound(frozen_at, what):
    took = time.monotonic() - frozen_at
    assert EARLIEST_S <= took <= LATEST_S, "%s after %.2f s (bound %.2f-%.2f s)" % (
        what, took, EARLIEST_S, LATEST_S)


def sleeping(seconds):
    print("RUNNING", flush=True)
    time.sleep(seconds)
    return 42


def _repo():
    return os.path.dirname(os.path.dirname(HERE))


# -- services holding a frozen client's connection -----------------------------

def test_the_control_service_drops_a_frozen_rank_0(processes):
    service = ControlService(SECRET, ["127.0.0.1"])
    try:
        code = ("import time; from tf_ring.elastic import control_client\n"
                "control_client.from_environment().report_commit(1)\n"
                "print('READY', flush=True); time.sleep(60)\n")
        client = start(processes, [sys.executable, "-c", code], TF_RING_ELASTIC_SECRET=SECRET,
                       **service.environment())
        assert client.stdout.readline().strip() == "READY", client.stderr.read()
        assert service.committed == 1 and service._server.proven == 1
        frozen_at = freeze(client)
        assert wait_for(lambda: service._server.proven == 0), "the frozen rank 0 is still served"
        assert_within_bound(frozen_at, "dropped")
        assert service._server.refusals.reasons["silent"] == 1
    finally:
        service.close()


def test_the_function_service_drops_a_frozen_rank(processes):
    """A rank holds its connection while it fetches the function and while
    it returns the result (none while the function runs): one stopped
    there, its payload fetched, is dropped."""
    service = function_service.FunctionService(
        SECRET, cloudpickle.dumps((sleeping, (60,), {}, "cloudpickle")), 1, "127.0.0.1")
    try:
        code = ("import os, time; from tf_ring.hosted import frames\n"
                "c = frames.connect(os.environ['TF_RING_HOSTED_FUNCTION'], "
                "os.environ['TF_RING_HOSTED_SECRET'], 'function')\n"
                "c.send({'op': 'fn', 'rank': 0, 'size': 1, 'world': 0}); c.receive_frame()\n"
                "print('FETCHED', flush=True); time.sleep(60)\n")
        proc = start(processes, [sys.executable, "-c", code],
                     TF_RING_HOSTED_FUNCTION=service.endpoint(["127.0.0.1"]))
        assert proc.stdout.readline().strip() == "FETCHED", proc.stderr.read()
        frozen_at = freeze(proc)
        assert wait_for(lambda: service._server.proven == 0), "the frozen rank is still served"
        assert_within_bound(frozen_at, "dropped")
        assert service._server.refusals.reasons["silent"] == 1 and service.results == {}
    finally:
        service.close()


def test_the_task_service_kills_the_daemon_of_a_frozen_agent(processes, tmp_path):
    service = task_service.TaskService(SECRET, "127.0.0.1")
    pidfile = tmp_path / "daemon.pid"
    processes[1].append(pidfile)
    try:
        proc = agent(processes, tmp_path, service.endpoint(["127.0.0.1"]),
                     ["echo", "$$", ">", str(pidfile), ";", "exec", "sleep", "60"])
        assert wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), 30)
        daemon = int(pidfile.read_text())
        frozen_at = freeze(proc)
        assert wait_for(lambda: not _alive(daemon)), "the frozen agent's daemon runs on"
        assert_within_bound(frozen_at, "killed")
        assert wait_for(lambda: service._server.proven == 0)
        assert service._server.refusals.reasons["silent"] == 1
    finally:
        service.close()


def _alive(pid):
    """True while `pid` runs (a zombie does not: its parent has not reaped it yet)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# -- clients waiting on a frozen service ---------------------------------------

def test_rank_0_gives_up_on_a_frozen_control_service(processes, capsys):
    proc, endpoint = party(processes, "control-service")
    env = {"TF_RING_CONTROL_TO": endpoint, "TF_RING_ELASTIC_SECRET": SECRET}
    committing, asking = (control_client.from_environment(env) for _ in range(2))
    committing.report_commit(1)
    assert asking.notices() == []  # both connected and answered: the service is alive
    frozen_at = freeze(proc)
    done = {}

    def call(name, fn):
        fn()
        done[name] = time.monotonic()
    threads = [threading.Thread(target=call, args=("commit", lambda: committing.report_commit(2))),
               threading.Thread(target=call, args=("notices", asking.notices))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=LATEST_S + 10)
    assert set(done) == {"commit", "notices"}, "rank 0 still waits on the frozen driver"
    # The reply's wait ends at the timeout; one more connection then fails its
    # handshake (its deadline, 1 s here), and rank 0 trains on without notices.
    for name, at in done.items():
        assert EARLIEST_S <= at - frozen_at <= LATEST_S + 1.5, (name, at - frozen_at)
    assert "cannot reach tfringrun's control channel" in capsys.readouterr().err


def test_the_rsh_agent_exits_255_on_a_frozen_task_service(processes, tmp_path):
    proc, endpoint = party(processes, "task-service")
    pidfile = tmp_path / "daemon.pid"
    processes[1].append(pidfile)  # the frozen service cannot kill its daemon itself
    running = agent(processes, tmp_path, endpoint,
                    ["echo", "$$", ">", str(pidfile), ";", "echo", "started", ";", "exec", "sleep",
                     "60"])
    assert running.stdout.readline().strip() == "started", running.stderr.read()
    frozen_at = freeze(proc)
    assert running.wait(timeout=LATEST_S + 5) == 255
    assert_within_bound(frozen_at, "the agent exited")
    assert "nothing from the peer" in running.stderr.read()


def test_a_rank_fails_naming_a_frozen_function_service(processes):
    """The function returns after 0.5 s; the connection for its result
    reaches the frozen service's kernel, and its handshake's deadline (5 s)
    ends the wait."""
    proc, endpoint = party(processes, "function-service", 0.5)
    running = rank(processes, endpoint)
    assert running.stdout.readline().strip() == "RUNNING", running.stderr.read()
    frozen_at = freeze(proc)
    assert running.wait(timeout=handshake.HANDSHAKE_TIMEOUT_S + 15) == 1
    took = time.monotonic() - frozen_at
    assert 5.0 <= took <= 0.5 + 5.0 + 4.0, took
    err = running.stderr.read()
    assert "lost the driver's function service" in err and "did not finish in time" in err, err


# -- quiet but alive: never cut ------------------------------------------------

def test_quiet_peers_are_never_cut(processes, tmp_path):
    """A command silent for three timeouts, a function as long, and rank 0
    idle as long between two commits: all end well, nothing refused."""
    quiet_s = 3 * TIMEOUT_S + 0.5
    tasks = task_service.TaskService(SECRET, "127.0.0.1")
    functions = function_service.FunctionService(
        SECRET, cloudpickle.dumps((sleeping, (quiet_s,), {}, "cloudpickle")), 1, "127.0.0.1")
    control = ControlService(SECRET, ["127.0.0.1"])
    try:
        silent = agent(processes, tmp_path, tasks.endpoint(["127.0.0.1"]),
                       ["sleep", str(quiet_s), ";", "echo", "done"])
        long_fn = rank(processes, functions.endpoint(["127.0.0.1"]))
        client = control_client.from_environment(dict(control.environment(),
                                                      TF_RING_ELASTIC_SECRET=SECRET))
        client.report_commit(1)
        time.sleep(quiet_s)
        client.report_commit(2)
        out, err = silent.communicate(timeout=30)
        assert silent.returncode == 0 and out.strip() == "done", err
        assert long_fn.wait(timeout=30) == 0, long_fn.stderr.read()
        assert cloudpickle.loads(functions.results[0]) == 42
        assert control.committed == 2 and control._server.proven == 1  # the same connection
        client.close()
        for service in (tasks, functions, control):
            assert service._server.refused == 0, service._server.refusals.reasons
    finally:
        tasks.close()
        functions.close()
        control.close()
