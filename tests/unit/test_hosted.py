"""The hosted-job layer (tf_ring.hosted) that Spark and Ray jobs run on: the
task service and its rsh agent behave as ssh would and trust nobody without
the job's secret; the driver returns results in rank order and names the
ranks that failed. The Spark and Ray tests run it inside the frameworks;
a function run on real ranks through the task service:
tests/launcher/test_hosted_jobs.py."""
import json
import os
import secrets
import signal
import socket
import struct
import subprocess
import sys
import time

import cloudpickle
import pytest

from tf_ring.plumbing.control_wire import ChannelError
from tf_ring.hosted import frames, function_service, job, rsh_agent, task_service
from tf_ring.spark import hosts_table


@pytest.fixture
def service():
    secret = secrets.token_hex(16)
    svc = task_service.TaskService(secret, "127.0.0.1")
    svc.secret = secret
    yield svc
    svc.close()


def _agent(svc, tmp_path, command, secret=None, extra_env=None, **popen):
    hosts = tmp_path / "hosts.json"
    hosts.write_text(json.dumps({"tfring-host-0": svc.endpoint(["127.0.0.1"])}))
    env = dict(os.environ, **(extra_env or {}))
    env[frames.SECRET_ENV] = secret or svc.secret
    argv = [sys.executable, "-m", "tf_ring.hosted.rsh_agent", "--hosts", str(hosts),
            "-p", "22", "-o", "BatchMode=yes", "-x", "tfring-host-0"] + command
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            **popen)


def test_agent_runs_the_command_like_ssh(service, tmp_path):
    agent = _agent(service, tmp_path, ["echo", "to-out;", "echo", "to-err", ">&2;", "exit", "7"])
    out, err = agent.communicate(timeout=30)
    assert (agent.returncode, out, err) == (7, b"to-out\n", b"to-err\n")
    assert service.commands_run == 1


def test_daemon_signal_is_reported_as_a_shell_would(service, tmp_path):
    agent = _agent(service, tmp_path, ["kill", "-TERM", "$$"])
    agent.communicate(timeout=30)
    assert agent.returncode == 128 + signal.SIGTERM


def test_wrong_secret_runs_nothing(service, tmp_path):
    agent = _agent(service, tmp_path, ["touch", str(tmp_path / "ran")], secret="not-the-secret")
    _, err = agent.communicate(timeout=30)
    assert agent.returncode == 255
    assert b"cannot reach the task service of tfring-host-0" in err
    assert service.commands_run == 0 and not (tmp_path / "ran").exists()


def test_only_open_mpi_settings_travel_to_the_daemon(service, tmp_path):
    extra = {"OMPI_MCA_btl_tcp_if_include": "lo", "TF_RING_AGENT_ONLY": "leaked"}
    agent = _agent(service, tmp_path, ["echo", '"$OMPI_MCA_btl_tcp_if_include|$TF_RING_AGENT_ONLY|'
                                               '$TF_RING_TASK_PYTHON"'], extra_env=extra)
    out, _ = agent.communicate(timeout=30)
    assert out.decode().strip() == "lo||%s" % sys.executable


def test_a_request_setting_other_variables_is_refused(service):
    channel = frames.connect(service.endpoint(["127.0.0.1"]), service.secret, frames.TASK)
    channel.send({"run": "true", "env": {"LD_PRELOAD": "/tmp/evil.so"}})
    with pytest.raises((ChannelError, OSError)):
        channel.receive_frame()
    assert service.commands_run == 0


def test_dropped_agent_kills_the_daemon_and_its_children(service, tmp_path):
    agent = _agent(service, tmp_path, ["sleep", "300", "&", "echo", "$!;", "wait"])
    pid = int(agent.stdout.readline())
    os.kill(pid, 0)  # the daemon's child runs
    agent.kill()  # as mpirun does when it tears the job down
    agent.wait()
    deadline = time.time() + 10
    while time.time() < deadline and _alive(pid):
        time.sleep(0.1)
    assert not _alive(pid)


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_oversized_frame_before_the_proof_is_refused(service):
    with socket.create_connection(("127.0.0.1", service.port), timeout=10) as sock:
        sock.recv(4096)  # the service's nonce
        sock.sendall(struct.pack(">cI", b"j", 1 << 30))
        assert sock.recv(4096) == b""  # dropped without reading a gigabyte
    deadline = time.time() + 5
    while service._server.refused == 0 and time.time() < deadline:
        time.sleep(0.05)
    assert service._server.refused == 1


def test_agent_arguments_skip_ssh_options():
    assert rsh_agent.split_argv(["--hosts", "f", "-p", "2222", "-x", "-o", "A=b", "h1", "prted",
                                 "--x"]) == ("f", "h1", ["prted", "--x"])
    with pytest.raises(rsh_agent.AgentFailed):
        rsh_agent.split_argv(["--hosts", "f", "h1"])


def test_tasks_are_grouped_by_the_host_spark_reports():
    gathered = [hosts_table.entry(i, host, "s%d" % i)
                for i, host in [(3, "10.0.0.2"), (0, "10.0.0.1"), (2, "10.0.0.1"), (1, "10.0.0.2")]]
    table = hosts_table.parse(gathered)
    assert hosts_table.group_by_host(table) == [("s0", 2, "10.0.0.1"), ("s1", 2, "10.0.0.2")]
    with pytest.raises(ValueError):
        hosts_table.parse(gathered[:2])


def test_launcher_command_uses_made_up_hosts_and_forwards_user_variables():
    argv = job.launcher_argv(3, [("tfring-host-0", 2), ("tfring-host-1", 1)], "/p/agent", 60,
                             nics="10.0.0.0/24", env_keys=["MY_SETTING"])
    assert argv[argv.index("-H") + 1] == "tfring-host-0:2,tfring-host-1:1"
    assert argv[argv.index("--rsh-agent") + 1] == "/p/agent"
    assert argv[argv.index("--network-interface") + 1] == "10.0.0.0/24"
    mpi_args = argv[argv.index("--mpi-args") + 1]
    # Daemons start from the driver, where the agent is: no tree spawn.
    assert mpi_args == "--prtemca plm_ssh_no_tree_spawn 1 -x MY_SETTING"
    assert argv[-4:] == ["--", "sh", "-c", job.RANK_COMMAND]


def _served(num_ranks):
    svc = function_service.FunctionService("s", b"payload", num_ranks, "127.0.0.1")
    svc.close()
    return svc


def test_results_come_in_rank_order():
    svc = _served(3)
    svc.results = {2: cloudpickle.dumps("c"), 0: cloudpickle.dumps("a"), 1: cloudpickle.dumps("b")}
    assert job.collect(svc, 3, 0, "who") == ["a", "b", "c"]


def test_failed_ranks_are_named_with_the_first_traceback():
    svc = _served(3)
    svc.results = {0: cloudpickle.dumps(0)}
    svc.errors = {2: "Traceback ...\nKeyError: 'x'\n", 1: "Traceback ...\nValueError: bad\n"}
    with pytest.raises(job.JobFailed) as failed:
        job.collect(svc, 3, 1, "tf_ring.spark.run")
    assert str(failed.value).startswith("tf_ring.spark.run: rank 1, 2 failed (of 3 ranks)")
    assert "ValueError: bad" in str(failed.value) and sorted(failed.value.errors) == [1, 2]


def test_a_rank_that_returned_nothing_fails_the_job():
    svc = _served(2)
    svc.results = {0: cloudpickle.dumps(0)}
    with pytest.raises(job.JobFailed, match=r"exit code 137\); ranks 1 returned no result"):
        job.collect(svc, 2, 137, "tf_ring.spark.run")


def test_importing_tf_ring_and_tf_ring_spark_leaves_pyspark_unimported():
    probe = ("import sys, tf_ring, tf_ring.spark, tf_ring.spark.keras, tf_ring.hosted.job; "
             "print([m in sys.modules for m in ('pyspark', 'pyarrow', 'pandas')])")
    out = subprocess.run([sys.executable, "-c", probe], stdout=subprocess.PIPE, text=True,
                         check=True, timeout=120).stdout
    assert out.strip() == "[False, False, False]"
