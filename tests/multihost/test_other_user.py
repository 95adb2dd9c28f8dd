"""Issue 41 on simulated hosts (each its own /dev/shm and /tmp, the launcher
on none): another user (`nobody`, setpriv inside a host's namespaces)
attacks an elastic job, and the job either finishes with its own state or
stops with an error naming the refused path, and nothing of theirs runs.
Single-machine rows (the spare's SO_PEERCRED, symlinks, the session base):
tests/unit/test_other_user.py."""
import base64
import glob
import os
import pickle
import re
import shlex
import stat
import threading
import time

import pytest

from multihost.elastic_runs import UNINTERRUPTED_TOTAL, ready_spares, run_counter, text
from multihost.simulated_hosts import SimulatedHosts, namespaces_available

AVAILABLE, WHY = namespaces_available()
pytestmark = pytest.mark.skipif(not AVAILABLE, reason=WHY)

NOBODY = "setpriv --reuid 65534 --regid 65534 --clear-groups "
STATE_ENV = b"TF_RING_ELASTIC_STATE_DIR="


class Exploit:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, ("touch %s" % self.marker,))


def job_directory_name(timeout=60):
    """The elastic job's directory, as soon as a process of the job carries
    it (what an attacker learns from `ls /dev/shm` on a host that made it
    already, or from a spare's command line)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open("/proc/%s/environ" % pid, "rb") as f:
                    for item in f.read().split(b"\0"):
                        if item.startswith(STATE_ENV):
                            return item[len(STATE_ENV):].decode()
            except OSError:
                pass
        time.sleep(0.05)
    return None


def squat_then_add(hosts, tmp_path, plant, extra_args=(), timeout=180):
    """Runs a 0.3 s-a-step counter job that discovery first puts on simhost0
    only. Once the job runs there (its first step printed: world 0 has formed
    without simhost1) and its directory name is out (as `ls /dev/shm` on
    simhost0 shows it), nobody runs `plant(name)` (a shell command) on
    simhost1, where no rank has run yet, and then discovery adds simhost1:
    the job grows onto the squatted host. Returns (rc, lines, name, the
    attacker's CompletedProcess).

    Listed before the launcher's first discovery, simhost1 would join world
    0 as an ordinary host, and no folder squatted for a grown host or spare
    would ever be touched (seen under CI's two workers); so the attacker
    waits for the first step. The job then holds at step 1 (committing,
    where the host update is noticed) until it has grown to 2 ranks or been
    stopped by the refusal, at most 240 pauses (72 s): under CI's load a job
    that went on stepping could end before it grew."""
    listed = tmp_path / "hosts"
    listed.write_text("simhost0\n")
    discovery = tmp_path / "discover.sh"
    discovery.write_text("#!/bin/sh\ncat %s\n" % listed)
    discovery.chmod(0o755)
    done = {}
    first_step = threading.Event()

    def on_line(line):
        if line.startswith("STEP rank=0 "):
            first_step.set()

    def attack():
        if not first_step.wait(timeout):
            return
        name = job_directory_name()
        if name:
            done["dir"] = name
            done["run"] = hosts.run_on("simhost1", NOBODY + "sh -c %s" % shlex.quote(plant(name)),
                                       capture_output=True, text=True, timeout=60)
            listed.write_text("simhost0\nsimhost1\n")

    attacker = threading.Thread(target=attack, daemon=True)
    attacker.start()
    rc, lines = run_counter(hosts, str(tmp_path), min_np=1,
                            job_env={"COUNTER_STEP_S": "0.3", "COUNTER_HOLD_AT_STEP": "1",
                                     "COUNTER_HOLD_UNTIL_SIZE": "2"},
                            timeout=timeout, discovery=str(discovery), extra_args=extra_args,
                            on_line=on_line)
    attacker.join(30)
    assert "run" in done, "the attacker never saw the job: " + text(lines, "err")[-3000:]
    return rc, lines, done["dir"], done["run"]


def assert_refused_or_own_state(rc, lines, name):
    """The job stopped naming the refused directory, or ended with its own state."""
    out, err = text(lines, "out"), text(lines, "err")
    assert name in err or rc == 0, out[-2000:] + err[-5000:]
    if rc == 0:
        ends = re.findall(r"END rank=\d size=\d step=30 total=(\d+)", out)
        assert ends and set(ends) == {str(UNINTERRUPTED_TOTAL)}, out[-3000:]
    else:
        assert "refusing the job directory %s" % name in err, err[-5000:]


def test_1_a_squatted_job_directory_with_a_planted_mirror_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"  # on the shared file system: any host's touch shows here
    planted = base64.b64encode(pickle.dumps(Exploit(str(marker)))).decode()
    with SimulatedHosts(2) as hosts:
        rc, lines, name, attacker = squat_then_add(hosts, tmp_path, lambda name: (
            "mkdir -m 0777 %s && echo %s | base64 -d > %s/commit.pkl && chmod 0777 %s"
            % (name, planted, name, name)))
    assert attacker.returncode == 0, attacker
    assert not marker.exists(), "the planted pickle ran as the job's user"
    assert_refused_or_own_state(rc, lines, name)
    assert name in text(lines, "err")


def test_4_state_on_hosts_is_private_while_the_job_runs_and_gone_after(tmp_path):
    with SimulatedHosts(2) as hosts:
        seen = {}

        def look_once_committed(line):
            if seen or not line.startswith("STEP rank=0 size=2 step=5 "):
                return
            for host in hosts.hostnames:
                shm = hosts.host_path(host, "/dev/shm")
                for job in glob.glob(os.path.join(shm, "tf_ring-elastic-*")) if shm else ():
                    mirror = os.path.join(job, "commit.pkl")
                    seen[host] = (stat.S_IMODE(os.lstat(job).st_mode),
                                  stat.S_IMODE(os.lstat(mirror).st_mode)
                                  if os.path.exists(mirror) else None,
                                  job[len(shm):])
                    seen[host + " read"] = hosts.run_on(
                        host, NOBODY + "cat %s/commit.pkl" % job[len(shm):],
                        capture_output=True, timeout=30)

        rc, lines = run_counter(hosts, str(tmp_path), min_np=2, job_env={"COUNTER_STEP_S": "0.2"},
                                on_line=look_once_committed, timeout=90)
        left = {h: hosts.run_on(h, "ls -d /dev/shm/tf_ring-elastic-* 2>/dev/null",
                                capture_output=True, text=True, timeout=30).stdout
                for h in hosts.hostnames}
    out, err = text(lines, "out"), text(lines, "err")
    assert rc == 0, out[-3000:] + err[-3000:]
    assert seen, "no job directory was seen on any host: " + err[-3000:]
    for host in hosts.hostnames:
        if host in seen:
            mode, mirror_mode, _ = seen[host]
            assert mode == 0o700 and mirror_mode in (0o600, None), seen
            read = seen[host + " read"]
            assert read.returncode != 0 and not read.stdout, read  # nobody reads nothing
    assert any(m[1] == 0o600 for h, m in seen.items() if not h.endswith(" read")), seen
    assert left == {h: "" for h in hosts.hostnames}, left  # restart.finish removed them


LISTENER = """import socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1] + '/0.sock')
s.listen(1)
s.settimeout(float(sys.argv[2]))
try:
    conn = s.accept()[0]
    conn.settimeout(5)
    print('GOT', len(conn.recv(1 << 20)), flush=True)
    conn.sendall(b'+exit 0\\n')
except socket.timeout:
    print('NOTHING', flush=True)
"""


def test_2_another_users_listener_on_a_spare_socket_gets_nothing(tmp_path):
    """--warm-spares: nobody makes the job's spare folder on simhost1 first
    and listens on 0.sock there; the stand-in must refuse the folder (naming
    it) and hand the listener nothing (no environment, no secrets), and the
    job must not end well on the listener's "exit 0"."""
    with SimulatedHosts(2) as hosts:
        rc, lines, name, attacker = squat_then_add(hosts, tmp_path, lambda name: (
            "mkdir -m 0777 -p {f} && chmod 0777 {n} {n}/spares && "
            "(python3 -c {l} {f} 12 >/tmp/listener.out 2>&1 &) && sleep 0.5".format(
                f="%s/spares/simhost1" % name, n=name, l=shlex.quote(LISTENER))),
            extra_args=["--warm-spares"])
        deadline, heard = time.time() + 30, ""
        while not re.search("GOT|NOTHING|Error", heard) and time.time() < deadline:
            time.sleep(0.5)
            heard = hosts.run_on("simhost1", "cat /tmp/listener.out", capture_output=True,
                                 text=True, timeout=30).stdout
    assert attacker.returncode == 0, attacker
    assert "NOTHING" in heard, heard
    assert_refused_or_own_state(rc, lines, name)
    assert name in text(lines, "err")  # it did grow onto simhost1, and refused the folder


def test_5_links_in_a_squatted_spare_folder_overwrite_no_file_of_the_users(tmp_path):
    """--warm-spares: nobody makes simhost1's spare folder first, with 0.pid
    and 0.log linking to a file of the job's user; the file stays as it was."""
    precious = tmp_path / "precious"
    precious.write_text("the user's own\n")
    with SimulatedHosts(2) as hosts:
        rc, lines, name, attacker = squat_then_add(hosts, tmp_path, lambda name: (
            "mkdir -m 0777 -p {f}/ranks && chmod 0777 {n} {n}/spares {f} && "
            "ln -s {p} {f}/0.pid && ln -s {p} {f}/0.log".format(
                f="%s/spares/simhost1" % name, n=name, p=precious)),
            extra_args=["--warm-spares"])
    assert attacker.returncode == 0, attacker
    assert precious.read_text() == "the user's own\n"
    assert_refused_or_own_state(rc, lines, name)
    assert name in text(lines, "err")


INTRUDER = """import json, socket, struct, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
body = json.dumps({"env": {}, "cwd": "/", "ignored": [], "cpus": [0],
                   "target": ["script", "/dev/null", []]}).encode()
try:
    s.sendall(struct.pack("!Q", len(body)) + body)
    s.settimeout(5)
    print("ANSWER", s.recv(1), flush=True)
except OSError as e:
    print("ANSWER", e, flush=True)
"""


def test_3_a_spare_reachable_by_another_user_runs_nothing_of_theirs(tmp_path):
    """--warm-spares: once simhost0's spare is ready, the test opens its folder
    and socket to everyone (as a relaxed umask or shared group could), so only
    the spare's SO_PEERCRED check stands in the way; nobody connects and sends
    a command: the spare answers nothing, and the job ends with its own state."""
    began = time.time() - 1
    with SimulatedHosts(2) as hosts:
        tried = {}

        def intrude_once_a_spare_is_ready(line):
            if tried or not line.startswith("STEP rank=0 size=2 "):
                return
            spares = ready_spares(hosts, ["simhost0"], began)
            if not spares:
                return
            shm = hosts.host_path("simhost0", "/dev/shm")
            folder = glob.glob(os.path.join(shm, "tf_ring-elastic-*", "spares", "simhost0"))[0]
            for path in (folder, os.path.dirname(folder), os.path.dirname(os.path.dirname(folder))):
                os.chmod(path, 0o755)
            sock = os.path.join(folder, "0.sock")
            os.chmod(sock, 0o777)
            tried["run"] = hosts.run_on("simhost0", NOBODY + "python3 -c %s %s" % (
                shlex.quote(INTRUDER), sock[len(shm) - len("/dev/shm"):]),
                capture_output=True, text=True, timeout=30)
            tried["spare alive"] = os.path.exists("/proc/%d" % spares[("simhost0", 0)])

        rc, lines = run_counter(hosts, str(tmp_path), min_np=2, job_env={"COUNTER_STEP_S": "0.5"},
                                on_line=intrude_once_a_spare_is_ready, extra_args=["--warm-spares"],
                                timeout=90)
    out, err = text(lines, "out"), text(lines, "err")
    assert tried, "no spare was ready before the job ended: " + err[-3000:]
    # The spare closed the connection without a word: seen as end of file,
    # a reset, or (when it closed before the intruder finished sending, as
    # on a busy machine) a broken pipe.
    closed = ("ANSWER b''", "reset", "Broken pipe")
    assert any(sign in tried["run"].stdout for sign in closed), tried["run"]
    assert tried["spare alive"], "the spare left its slot for another user's connection"
    assert rc == 0, out[-3000:] + err[-3000:]
    ends = re.findall(r"END rank=\d size=2 step=30 total=(\d+)", out)
    assert sorted(ends) == [str(UNINTERRUPTED_TOTAL)] * 2, out[-3000:]
