"""Issue 41's rows that need no hosts: another user (`nobody`, through
setpriv) squats, plants or connects, on this machine, and the job's code
refuses it, naming the path, while nothing of theirs runs as the job's
user. The same attacks on simulated hosts: tests/multihost/test_other_user.py."""
import os
import pathlib
import pickle
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time

import pytest

from tf_ring.elastic import mirror
from tf_ring.plumbing import env_names, private_dirs
from tf_ring.run import session_dirs
from tf_ring.elastic_driver import warm_spares

NOBODY = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                                reason="acting as another user needs root and setpriv")


def as_nobody(code, **kw):
    """Runs Python `code` as user nobody; the CompletedProcess."""
    return subprocess.run(NOBODY + [sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=30, **kw)


@pytest.fixture
def shared():
    """A sticky world-writable folder, as /dev/shm and /tmp are (pytest's
    own folders are root's, 0700: nobody could not reach one)."""
    folder = tempfile.mkdtemp(prefix="tf_ring-other-user-")
    os.chmod(folder, 0o1777)
    yield pathlib.Path(folder)
    shutil.rmtree(folder, ignore_errors=True)


class Exploit:
    """A pickle that, when loaded, creates `marker`."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, ("touch %s" % self.marker,))


def test_1_a_squatted_job_directory_with_a_planted_mirror_is_refused_unread(shared):
    job = shared / "tf_ring-elastic-0123abcd"
    marker = shared / "pwned"
    planted = pickle.dumps(Exploit(str(marker)))
    made = as_nobody("import os; os.mkdir(%r); os.chmod(%r, 0o777); open(%r, 'wb').write(%r)"
                     % (str(job), str(job), str(job / mirror.MIRROR_FILE), planted))
    assert made.returncode == 0, made.stderr
    with pytest.raises(private_dirs.UnsafeDirectory, match=str(job)):
        mirror.load_mirror(str(job), "secret")
    with pytest.raises(private_dirs.UnsafeDirectory, match=str(job)):
        mirror.MirrorWriter(str(job), "secret")
    assert not marker.exists()


def test_1_a_planted_unsigned_mirror_in_the_jobs_own_directory_is_refused(shared):
    job = private_dirs.make_private_dir(str(shared / "tf_ring-elastic-own"))
    marker = shared / "pwned"
    with private_dirs.create_private_file(os.path.join(job, mirror.MIRROR_FILE)) as f:
        f.write(pickle.dumps(Exploit(str(marker))))  # e.g. copied in by a process of the user's
    with pytest.raises(mirror.MirrorRefused, match=mirror.MIRROR_FILE):
        mirror.load_mirror(job, "secret")
    assert not marker.exists()


def test_2_nobody_cannot_make_the_spare_socket_in_the_jobs_directory(shared):
    host = warm_spares.host_directory(str(shared / "tf_ring-elastic-job" / "spares"))
    tried = as_nobody("import socket; socket.socket(socket.AF_UNIX).bind(%r)"
                      % os.path.join(host, "0.sock"))
    assert tried.returncode != 0 and "PermissionError" in tried.stderr, tried.stderr
    assert not os.path.exists(os.path.join(host, "0.sock"))


def test_2_a_spare_directory_another_user_made_first_is_refused(shared):
    base = shared / "tf_ring-elastic-job"
    made = as_nobody("import os, socket; os.makedirs(%r, 0o777); os.chmod(%r, 0o777)"
                     % (str(base / "spares" / socket.gethostname()), str(base)))
    assert made.returncode == 0, made.stderr
    with pytest.raises(private_dirs.UnsafeDirectory, match=str(base)):
        warm_spares.host_directory(str(base / "spares"))


def test_3_a_spare_runs_nothing_another_user_sends(shared, tmp_path):
    host = warm_spares.host_directory(str(shared / "tf_ring-elastic-job" / "spares"))
    env = dict(os.environ, **{env_names.SPARE_IMPORTS: "", env_names.SPARE_IDLE_S: "30",
                              "PYTHONPATH": os.pathsep.join(sys.path)})
    spare = subprocess.Popen([sys.executable, warm_spares.SCRIPT, "spare", host, "0"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    sock = os.path.join(host, "0.sock")
    try:
        deadline = time.time() + 30
        while not os.path.exists(sock):
            assert time.time() < deadline and spare.poll() is None, "no spare came up"
            time.sleep(0.05)
        # The way in a relaxed umask or a shared group would give: only
        # the SO_PEERCRED check stands between nobody and the spare.
        for path in (host, os.path.dirname(host), os.path.dirname(os.path.dirname(host))):
            os.chmod(path, 0o755)
        os.chmod(sock, 0o777)
        marker = tmp_path / "ran"
        evil = tmp_path / "evil.py"
        evil.write_text("open(%r, 'w').close()\n" % str(marker))
        message = {"env": {"PATH": "/usr/bin:/bin"}, "cwd": "/", "ignored": [], "cpus": [0],
                   "target": ["script", str(evil), []]}
        tried = as_nobody(
            "import json, socket, struct\n"
            "s = socket.socket(socket.AF_UNIX); s.connect(%r)\n"
            "body = json.dumps(%r).encode()\n"
            "try:\n"
            "    s.sendall(struct.pack('!Q', len(body)) + body); got = s.recv(1)\n"
            "except OSError:\n"
            "    got = b''\n"
            "print('GOT', got)\n" % (sock, message))
        assert "GOT b''" in tried.stdout, tried.stdout + tried.stderr
        time.sleep(0.5)
        assert spare.poll() is None, "the spare left its slot for another user's connection"
        assert os.path.exists(sock) and not marker.exists()
    finally:
        spare.kill()
        spare.wait()


def test_4_a_commit_leaves_a_0700_directory_and_a_0600_file_nobody_can_read(shared):
    job = str(shared / "tf_ring-elastic-job")
    writer = mirror.MirrorWriter(job, "secret")
    writer.submit({"step": 3})
    assert writer.flush(10)
    writer.close()
    path = os.path.join(job, mirror.MIRROR_FILE)
    assert os.stat(job).st_mode & 0o777 == 0o700
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert os.listdir(job) == [mirror.MIRROR_FILE]  # no temporary file left
    read = as_nobody("open(%r, 'rb').read()" % path)
    assert read.returncode != 0 and "PermissionError" in read.stderr, read.stderr
    assert mirror.load_mirror(job, "secret") == {"step": 3}


def test_5_a_symlinked_pid_in_a_squatted_directory_does_not_overwrite_the_users_file(
        shared, tmp_path):
    victim = tmp_path / "precious"
    victim.write_text("the user's own\n")
    base = shared / "tf_ring-elastic-job"
    host = base / "spares" / socket.gethostname()
    made = as_nobody("import os; os.makedirs(%r, 0o777); os.mkdir(%r);"
                     "os.symlink(%r, %r); os.symlink(%r, %r)"
                     % (str(host), str(host / "ranks"), str(victim), str(host / "0.pid"),
                        str(victim), str(host / "0.log")))
    assert made.returncode == 0, made.stderr
    env = dict(os.environ, **{env_names.SPARE_DIR: str(base / "spares"),
                              env_names.SPARE_IMPORTS: "", "PYTHONPATH": os.pathsep.join(sys.path)})
    ran = subprocess.run([sys.executable, warm_spares.SCRIPT, "stand-in", "--", "true"],
                         env=env, capture_output=True, text=True, timeout=30)
    assert ran.returncode != 0 and str(base) in ran.stderr, ran.stderr
    assert victim.read_text() == "the user's own\n"
    # a link in the job's own directory (its user's doing) is replaced, not followed
    own = warm_spares.host_directory(str(shared / "tf_ring-elastic-own" / "spares"))
    os.symlink(str(victim), os.path.join(own, "0.pid"))
    with private_dirs.create_private_file(os.path.join(own, "0.pid")) as f:
        f.write(b"123")
    assert not os.path.islink(os.path.join(own, "0.pid"))
    assert victim.read_text() == "the user's own\n"


def test_9_a_session_base_another_user_made_first_is_refused_and_kept(monkeypatch, shared,
                                                                      capsys):
    monkeypatch.setattr(session_dirs, "_PREFIX", str(shared) + "/tfringrun-")
    base = session_dirs.base_for("feedbeef")
    made = as_nobody("import os; os.mkdir(%r, 0o777); open(%r + '/mine', 'w')" % (base, base))
    assert made.returncode == 0, made.stderr
    assert not session_dirs.make("feedbeef", "", {})
    assert base in capsys.readouterr().err
    session_dirs.remove("feedbeef")  # the job's teardown: not the other user's directory
    assert os.path.exists(base + "/mine")
    assert session_dirs.make("0badc0de", "", {})
    assert os.stat(session_dirs.base_for("0badc0de")).st_mode & 0o777 == 0o700
    session_dirs.remove("0badc0de")
    assert not os.path.exists(session_dirs.base_for("0badc0de"))


def test_9_tfringrun_stops_before_mpirun_naming_a_squatted_session_base(monkeypatch, capsys):
    monkeypatch.setattr(os, "urandom", lambda n: bytes.fromhex("feedbeef")[:n])  # the job token
    base = session_dirs.base_for("feedbeef")
    shutil.rmtree(base, ignore_errors=True)
    made = as_nobody("import os; os.mkdir(%r, 0o777)" % base)
    assert made.returncode == 0, made.stderr
    try:
        from tf_ring.run import launcher
        assert launcher.main(["-np", "1", "true"]) == 1
        assert "refusing the job directory %s" % base in capsys.readouterr().err
        assert os.path.isdir(base)  # the other user's, left alone
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_6_another_users_garbage_on_the_control_channel_is_counted_and_harmless():
    """Row 6's notices now go over the control channel: nobody sends it
    non-ASCII and broken frames; each is refused and counted, and the job's
    own client is served as before."""
    from tf_ring.elastic import control_client
    from tf_ring.elastic.errors import HostUpdateResult
    from tf_ring.elastic_driver.control_service import ControlService

    service = ControlService("s3cret", ["127.0.0.1"])
    try:
        sent = as_nobody(
            "import socket, struct\n"
            "for payload in (b'\\xff\\xfe',"
            " '{\"nonce\": \"n\", \"proof\": \"\\u00e9\"}'.encode(),"
            " b'{\"op\": \"notices\", \"since\": 0}'):\n"
            "    s = socket.create_connection(('127.0.0.1', %d), timeout=5)\n"
            "    s.recv(struct.unpack('>cI', s.recv(5))[1], socket.MSG_WAITALL)  # the nonce\n"
            "    s.sendall(struct.pack('>cI', b'j', len(payload)) + payload)\n"
            "    print('ANSWER', s.recv(4096))\n" % service.port)
        assert sent.stdout.count("ANSWER b''") == 3, sent.stdout + sent.stderr
        deadline = time.time() + 5
        while service.refused < 3 and time.time() < deadline:
            time.sleep(0.05)
        assert service.refused == 3
        service.add_notice(1.0, HostUpdateResult.added)
        client = control_client.from_environment(
            dict(service.environment(), TF_RING_ELASTIC_SECRET="s3cret"))
        try:
            assert len(client.notices()) == 1
        finally:
            client.close()
    finally:
        service.close()


# -- issue 47: the hosted job's `python -m` children, the estimator's store ---

PLANTED = ("import os\n"
           "with open(os.path.join(os.path.dirname(os.path.dirname(__file__)), 'planted-ran'),"
           " 'a') as f:\n"
           "    f.write(os.environ.get('TF_RING_HOSTED_SECRET', '-') + '\\n')\n")


@pytest.fixture
def planted(shared):
    """`shared` with a tf_ring package nobody planted in it: a child that
    starts there with the directory on its module path imports it."""
    made = as_nobody("import os; os.mkdir(%r); open(%r, 'w').write(%r)" % (
        str(shared / "tf_ring"), str(shared / "tf_ring" / "__init__.py"), PLANTED))
    assert made.returncode == 0, made.stderr
    return shared


def _forty_two():
    return 42  # the rank cannot import this module: cloudpickle sends it by value


def test_47_a_rank_started_in_a_shared_directory_imports_nothing_planted_there(planted):
    import cloudpickle
    from tf_ring.hosted import frames, function_service, job, rank_entry, task_service
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    payload = cloudpickle.dumps((_forty_two, (), {}, "cloudpickle"))
    service = function_service.FunctionService("s3cret", payload, 1, "127.0.0.1")
    try:
        env = dict(os.environ, OMPI_COMM_WORLD_RANK="0", OMPI_COMM_WORLD_SIZE="1",
                   **{frames.SECRET_ENV: "s3cret", task_service.PYTHON_ENV: sys.executable,
                      rank_entry.FUNCTION_ENV: service.endpoint(["127.0.0.1"])})
        ran = subprocess.run(["sh", "-c", job.RANK_COMMAND], cwd=str(planted), env=env,
                             capture_output=True, text=True, timeout=120)
        assert ran.returncode == 0, ran.stderr
        assert pickle.loads(service.results[0]) == 42
    finally:
        service.close()
    assert not (planted / "planted-ran").exists()


def test_47_the_rsh_agent_and_tfringrun_started_there_import_nothing_planted(planted):
    from tf_ring.hosted import frames, job, task_service
    service = task_service.TaskService("s3cret", "127.0.0.1")
    directory = job.AgentDirectory()
    try:
        directory.set_hosts([("tfring-host-0", service.endpoint(["127.0.0.1"]), 1)])
        env = dict(os.environ, **{frames.SECRET_ENV: "s3cret"})
        agent = subprocess.run([directory.agent, "tfring-host-0", "echo", "reached"],
                               cwd=str(planted), env=env, capture_output=True, text=True,
                               timeout=60)
        assert (agent.returncode, agent.stdout) == (0, "reached\n"), agent.stderr
        argv = job.launcher_argv(1, [("tfring-host-0", 1)], directory.agent, 10)
        launcher = subprocess.run(argv[:argv.index("-np")] + ["--help"], cwd=str(planted),
                                  env=env, capture_output=True, text=True, timeout=60)
        assert launcher.returncode == 0 and "usage" in launcher.stdout, launcher.stderr
    finally:
        directory.close()
        service.close()
    assert not (planted / "planted-ran").exists()


def test_47_the_estimators_run_directory_is_private_and_another_users_is_refused(shared):
    from tf_ring.spark.keras import store
    run_dir = str(shared / "run-private")
    old = os.umask(0)
    try:
        store.make_run_dir(run_dir, "private")
        for name in ("train", "val"):
            os.mkdir(os.path.join(run_dir, name), 0o755)  # as a writer with umask 022 would
            with open(os.path.join(run_dir, name, "part-0.parquet"), "w") as f:
                f.write("rows")
            os.chmod(os.path.join(run_dir, name, "part-0.parquet"), 0o644)
        store.settle_modes(run_dir, "private")
        group_dir = store.make_run_dir(str(shared / "run-group"), "group")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(run_dir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(os.path.join(run_dir, "train", "part-0.parquet")).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(group_dir).st_mode) & 0o777 == 0o770
    read = as_nobody("print(open(%r).read())" % os.path.join(run_dir, "train", "part-0.parquet"))
    assert read.returncode != 0 and "PermissionError" in read.stderr, read.stdout
    # A run_id another user made first (or linked elsewhere) is refused by name.
    squatted = str(shared / "run-squatted")
    assert as_nobody("import os; os.mkdir(%r, 0o777)" % squatted).returncode == 0
    with pytest.raises(ValueError, match="refusing the run directory %s" % squatted):
        store.make_run_dir(squatted, "private")
    with pytest.raises(ValueError, match="store_mode='world'"):
        store.check_mode("world")
