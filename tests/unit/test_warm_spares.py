"""tfringrun --warm-spares without MPI: the stand-in hands a rank's command
to a spare that waits on its host (tf_ring/elastic_driver/warm_spares.py), and the
rank must not be able to tell, nor the launcher: the command's output,
working directory, arguments, exit code (also through os._exit), signals,
and death with its stand-in. Spares here import nothing ahead (the
multi-host test uses the real imports), so they are ready at once. tfringrun
refusing --warm-spares outside an elastic restart job:
tests/launcher/test_warm_spares_jobs.py."""
import argparse
import os
import signal
import subprocess
import sys
import time

import pytest

from tf_ring.run import arguments, launcher
from tf_ring.elastic_driver import warm_spares
from tf_ring.plumbing import env_names

SCRIPT = warm_spares.SCRIPT
JOB = """import os, sys, time
import neighbour  # found beside the script, as a cold start finds it
print("JOB warm=%s pid=%d argv=%s cwd=%s" % (os.environ.get("TF_RING_WARM_SPARE"), os.getpid(),
                                             sys.argv[1:], os.getcwd()), flush=True)
print("POLICY %d NICE %d" % (os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)))
print("to stderr", file=sys.stderr, flush=True)
action = os.environ.get("JOB_ACTION", "")
if action == "sleep":
    time.sleep(60)
if action == "raise":
    def deep():
        raise ValueError("an ordinary bug")
    deep()
if action == "os_exit":
    os._exit(75)
print("x" * 4000000)  # more than a pipe holds: the exit's flush takes a while
print("LAST line, left in the buffer for the exit to flush")
sys.exit(int(os.environ.get("JOB_CODE", "0")))
"""


@pytest.fixture
def job(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "train.py").write_text(JOB)
    (folder / "neighbour.py").write_text("")
    env = dict(os.environ, **{env_names.SPARE_DIR: str(tmp_path / "spares"),
                              env_names.SPARE_IMPORTS: "", env_names.SPARE_IDLE_S: "30",
                              "PYTHONPATH": os.pathsep.join(sys.path)})
    yield folder, env
    subprocess.run(["pkill", "-f", "warm_spares.py spare %s" % (tmp_path / "spares")], check=False)


def host_dir(env):
    return warm_spares.host_directory(env[env_names.SPARE_DIR])


def stand_in(folder, env, *args, **extra):
    cmd = [sys.executable, SCRIPT, "stand-in", "--", sys.executable, "train.py"] + list(args)
    return subprocess.run(cmd, cwd=str(folder), env=dict(env, **extra), capture_output=True,
                          text=True, timeout=60)


def wait_for_spare(env, slot="0"):
    path = os.path.join(host_dir(env), slot + ".sock")
    deadline = time.time() + 30
    while not os.path.exists(path):
        assert time.time() < deadline, "no spare came up: " + open(
            os.path.join(host_dir(env), slot + ".log")).read()
        time.sleep(0.05)
    with open(os.path.join(host_dir(env), slot + ".pid")) as f:
        return int(f.read())


def test_the_first_rank_runs_cold_and_the_next_one_is_the_spare_it_left(job):
    folder, env = job
    cold = stand_in(folder, env, "a", "b")
    assert cold.returncode == 0, cold.stderr
    assert "JOB warm=None" in cold.stdout and "argv=['a', 'b']" in cold.stdout, cold.stdout
    spare_pid = wait_for_spare(env)
    if os.geteuid() == 0:  # may lower its priority, as it can raise it back
        assert os.sched_getscheduler(spare_pid) == os.SCHED_IDLE
    warm = stand_in(folder, env, "c", JOB_CODE="3")
    assert warm.returncode == 3, warm.stderr
    assert "JOB warm=1 pid=%d argv=['c'] cwd=%s" % (spare_pid, folder) in warm.stdout, warm.stdout
    assert warm.stderr == "to stderr\n"
    assert warm.stdout.endswith("LAST line, left in the buffer for the exit to flush\n")
    # A spare waits at the lowest priority; the rank it becomes runs as a cold one.
    assert "POLICY %d NICE %d" % (os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)) \
        in warm.stdout, warm.stdout
    # The warm rank left a new spare behind for the next world.
    assert wait_for_spare(env) != spare_pid


def test_a_module_command_and_the_exit_paths_a_rank_uses(job):
    folder, env = job
    stand_in(folder, env)
    wait_for_spare(env)
    module = subprocess.run([sys.executable, SCRIPT, "stand-in", "--", sys.executable, "-m",
                             "train", "-x"], cwd=str(folder), env=env, capture_output=True,
                            text=True, timeout=60)
    assert module.returncode == 0 and "JOB warm=1" in module.stdout, module.stdout + module.stderr
    assert "argv=['-x']" in module.stdout
    wait_for_spare(env)
    relaunch = stand_in(folder, env, JOB_ACTION="os_exit")  # exit_for_relaunch's way out
    assert relaunch.returncode == 75 and "JOB warm=1" in relaunch.stdout, relaunch.stderr
    wait_for_spare(env)
    bug = stand_in(folder, env, JOB_ACTION="raise")
    assert bug.returncode == 1 and "JOB warm=1" in bug.stdout
    # The traceback a cold start prints: the script's frames only.
    assert bug.stderr.startswith("to stderr\nTraceback (most recent call last):\n  File \""), bug.stderr
    assert "warm_spares" not in bug.stderr and "runpy" not in bug.stderr, bug.stderr
    assert bug.stderr.rstrip().endswith("ValueError: an ordinary bug")


def test_commands_a_spare_cannot_run_start_cold_and_leave_the_spare(job):
    folder, env = job
    stand_in(folder, env)
    spare_pid = wait_for_spare(env)
    for command in ([sys.executable, "-c", "print('inline')"], ["sh", "-c", "echo shell"]):
        done = subprocess.run([sys.executable, SCRIPT, "stand-in", "--"] + command,
                              cwd=str(folder), env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and done.stdout.strip() in ("inline", "shell"), done
    assert wait_for_spare(env) == spare_pid
    missing = subprocess.run([sys.executable, SCRIPT, "stand-in", "--", "no-such-program"],
                             env=env, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 127
    assert "tfringrun: cannot run no-such-program" in missing.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_signal_to_the_stand_in_ends_the_rank_it_handed_over(job, signum):
    """mpirun's teardown signals the process it started: a TERM is passed on,
    and the stand-in dies of the rank's death; a KILL of the stand-in takes
    the rank down with it."""
    folder, env = job
    stand_in(folder, env)
    spare_pid = wait_for_spare(env)
    proc = subprocess.Popen([sys.executable, SCRIPT, "stand-in", "--", sys.executable, "train.py"],
                            cwd=str(folder), env=dict(env, JOB_ACTION="sleep"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().startswith("JOB warm=1 pid=%d" % spare_pid)
    os.kill(proc.pid, signum)
    assert proc.wait(timeout=30) == -signum
    deadline = time.time() + 10
    while warm_spares._alive(spare_pid):
        assert time.time() < deadline, "the rank outlived its stand-in"
        time.sleep(0.05)


def test_a_spare_leaves_with_the_jobs_directory_or_when_its_host_has_no_rank(job):
    folder, env = job
    stand_in(folder, env)
    first = wait_for_spare(env)
    os.remove(os.path.join(host_dir(env), "0.sock"))  # as the launcher's clean-up does
    deadline = time.time() + 10
    while warm_spares._alive(first):
        assert time.time() < deadline, "the spare outlived its directory"
        time.sleep(0.05)
    idle_env = dict(env, **{env_names.SPARE_IDLE_S: "1"})
    stand_in(folder, idle_env)  # its rank ends at once; the spare it starts finds no rank left
    second = wait_for_spare(idle_env)
    deadline = time.time() + 15
    while warm_spares._alive(second):
        assert time.time() < deadline, "an idle spare did not leave"
        time.sleep(0.1)
    assert not os.path.exists(os.path.join(host_dir(env), "0.sock"))


def test_runnable_targets():
    python = sys.executable
    assert warm_spares.runnable_target([python, "t.py", "-x"]) == ("script", "t.py", ["-x"])
    assert warm_spares.runnable_target([python, "-u", "-m", "pkg.mod", "a"]) == \
        ("module", "pkg.mod", ["a"])
    for other in ([python, "-c", "pass"], [python], ["sh", "t.py"], [python, "-W", "x", "t.py"]):
        assert warm_spares.runnable_target(other) is None, other


def test_the_launcher_wraps_the_command_only_in_an_elastic_restart_job(tmp_path):
    base = ["-np", "2", "--min-np", "1", "-H", "a:1,b:1"]
    args = arguments.parse_args(base + ["--warm-spares", "python", "t.py"])
    cmd = launcher.build_command(args, is_root=False, cores=2, environ={})
    assert cmd[-6:] == [sys.executable, SCRIPT, "stand-in", "--", "python", "t.py"]
    plain = launcher.build_command(arguments.parse_args(base + ["python", "t.py"]), is_root=False,
                                   cores=2, environ={})
    assert plain[-2:] == ["python", "t.py"] and "stand-in" not in plain


def test_seeding_starts_a_hosts_spares_and_waits_until_they_are_ready(tmp_path):
    """What the driver runs on a host discovery added (spare_seeding): the
    command carries what the imports read and never a secret, and ends once
    every slot's spare is ready."""
    from tf_ring.elastic_driver import spare_seeding
    env = dict(os.environ, **{env_names.SPARE_DIR: str(tmp_path / "spares"),
                              env_names.SPARE_IMPORTS: "", env_names.SPARE_IDLE_S: "30",
                              "TF_RING_ELASTIC_SECRET": "s3cret", "TF_RING_BEAT_TOKEN": "t0ken",
                              "KERAS_BACKEND": "tensorflow", "PYTHONPATH": os.pathsep.join(sys.path)})
    command = spare_seeding.seed_command(env, slots=2, wait_s=20)
    assert "s3cret" not in command and "t0ken" not in command
    assert "KERAS_BACKEND=tensorflow" in command and "TF_RING_SPARE_IMPORTS=''" in command
    try:
        ready = spare_seeding.seed_hosts(argparse.Namespace(rsh_agent=None, ssh_port=None), env,
                                         [("localhost", 2)], sys.stderr, wait_s=20)
        assert ready == ["localhost"]
        for slot in ("0", "1"):
            assert os.path.exists(os.path.join(host_dir(env), slot + ".sock"))
            assert warm_spares._alive(wait_for_spare(env, slot))
    finally:
        subprocess.run(["pkill", "-f", "warm_spares.py spare %s" % (tmp_path / "spares")],
                       check=False)


def test_seeding_reaches_a_host_as_mpirun_would():
    from tf_ring.elastic_driver import spare_seeding
    ssh = argparse.Namespace(rsh_agent=None, ssh_port=2222)
    assert spare_seeding.remote_argv(ssh, "node7", "cmd") == \
        ["ssh", "-o", "BatchMode=yes", "-p", "2222", "--", "node7", "cmd"]
    agent = argparse.Namespace(rsh_agent="/opt/agent --fast", ssh_port=None)
    assert spare_seeding.remote_argv(agent, "node7", "cmd") == ["/opt/agent", "--fast", "node7", "cmd"]
    assert spare_seeding.remote_argv(ssh, "localhost", "cmd") == ["sh", "-c", "cmd"]
