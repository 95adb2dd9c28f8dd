"""Runs a job of tests/elastic_jobs (counter_job.py or tape_job.py) under tfringrun's elastic mode on
simulated hosts (1 rank a host, the launcher outside them) and times what
happened, for tests/multihost/test_elastic_loss.py and
benchmarks/elastic_recovery.py. Free of pytest."""
import glob
import os
import re
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JOBS = os.path.join(REPO, "tests", "elastic_jobs")
COUNTER_JOB = os.path.join(JOBS, "counter_job.py")
SHM_LOSS_JOB = os.path.join(JOBS, "shm_loss_job.py")
TAPE_JOB = os.path.join(JOBS, "tape_job.py")
KERAS_JOB = os.path.join(JOBS, "keras_job.py")
STEPS = 30  # counter_job's
UNINTERRUPTED_TOTAL = sum(range(STEPS))  # what a run that nothing interrupts ends with


def discovery_script(directory, hostnames):
    path = os.path.join(directory, "discover.sh")
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + "".join("echo %s\n" % h for h in hostnames))
    os.chmod(path, 0o755)
    return path


def run_counter(hosts, directory, min_np, job_env, timeout=240, job=COUNTER_JOB,
                recovery="restart", on_line=None, extra_args=(), discovery=None, ranks_per_host=1):
    """tfringrun -np <hosts * ranks_per_host> --min-np min_np --recovery
    `recovery` with a discovery script listing every host. Returns (rc,
    [(time, 'out'|'err', line)]) in arrival order. on_line(line), if given,
    sees every line as it arrives (from the reader threads). discovery:
    another discovery script."""
    flags = hosts.launcher_flags(ranks_per_host)
    i = flags.index("-H")
    del flags[i:i + 2]  # the hosts come from the discovery script
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2", **job_env)
    listed = [h if ranks_per_host == 1 else "%s:%d" % (h, ranks_per_host) for h in hosts.hostnames]
    cmd = [sys.executable, "-m", "tf_ring.run", "-np", str(hosts.n_hosts * ranks_per_host),
           "--min-np", str(min_np),
           "--host-discovery-script", discovery or discovery_script(directory, listed),
           # --elastic-timeout 10: a wrong blacklist fails fast, not in 600 s
           "--elastic-timeout", "10", "--recovery", recovery] + list(extra_args) + flags
    proc = subprocess.Popen(cmd + [sys.executable, job], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    lines, lock = [], threading.Lock()

    def read(stream, name):
        for line in stream:
            for part in job_lines(line):
                with lock:
                    lines.append((time.time(), name, part))
                if on_line is not None:
                    on_line(part + "\n")

    readers = [threading.Thread(target=read, args=(s, n), daemon=True)
               for s, n in ((proc.stdout, "out"), (proc.stderr, "err"))]
    for r in readers:
        r.start()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        subprocess.run(["pkill", "-KILL", "-s", str(proc.pid)], check=False)  # its session only
        proc.wait()
        lines.append((time.time(), "err", "elastic_runs: the job did not end within %d s" % timeout))
    for r in readers:
        r.join(5)
    return proc.returncode, lines


# mpirun relays each rank's output as it comes, and a rank's line can lose
# its end to another rank's (seen in CI: "STEP ... t=1795876859.030START
# rank=1 size=2 ..."): the job's own lines are split apart again here.
_JOB_LINE_START = re.compile(r"(?<=.)(?=(?:START|STEP|HOLD|END) rank=)")


def job_lines(line):
    """`line` as the lines the ranks wrote (usually itself, without its newline)."""
    return _JOB_LINE_START.split(line.rstrip("\n"))


def text(lines, stream=None):
    return "\n".join(l for _, s, l in lines if stream in (None, s))


def first(lines, prefix, after=0.0):
    """Arrival time and text of the first line starting with `prefix` after `after`."""
    for t, _, line in lines:
        if t >= after and line.startswith(prefix):
            return t, line
    return None, None


def lost_rank(hosts, directory, kill_at=4, job=COUNTER_JOB, recovery="restart", min_np=None,
              extra_args=(), wrapper_too=False):
    """Kills the last rank (SIGKILL) at step `kill_at` (or at each step of
    "k1,k2": tests/elastic_jobs/kill_plan.py); returns (rc, lines,
    timings): seconds from the kill to the driver's relaunch, to the new
    world's START (processes started, TensorFlow imported, init, state synced
    from the mirror; in-process: the survivors shrunk and synced) and to its
    first finished step. wrapper_too: the rank's wrapper dies with it
    (kill_plan.py)."""
    marker = os.path.join(directory, "killed")
    rc, lines = run_counter(hosts, directory,
                            min_np=hosts.n_hosts - 1 if min_np is None else min_np,
                            job_env={"COUNTER_KILL_RANK_AT": str(kill_at),
                                     "COUNTER_MARKER": marker,
                                     "COUNTER_KILL_WRAPPER_TOO": "1" if wrapper_too else "0"},
                            job=job, recovery=recovery,
                            extra_args=extra_args)
    timings = {}
    if os.path.exists(marker):
        with open(marker) as f:
            killed = float(f.read())
        size = "size=%d " % (hosts.n_hosts - 1)
        relaunch, _ = first(lines, "tfringrun: elastic world 1", killed)
        start = [float(l.split("t=")[1]) for _, _, l in lines if l.startswith("START") and size in l]
        step = [float(l.split("t=")[1]) for _, _, l in lines if l.startswith("STEP") and size in l]
        timings = {"relaunch": relaunch and relaunch - killed,
                   "synced": start and min(start) - killed,
                   "first_step": step and max(step[:hosts.n_hosts - 1]) - killed}
    return rc, lines, timings


def ready_spares(hosts, hostnames, since, slots=1):
    """{(host, slot): spare pid} of this test's job (its directory made after
    `since`), ready ones only. Each host's /dev/shm is its own: it is read
    through a live process of that host (hosts.host_path)."""
    found = {}
    for host in hostnames:
        shm = hosts.host_path(host, "/dev/shm")
        for job in glob.glob(os.path.join(shm, "tf_ring-elastic-*", "spares")) if shm else ():
            try:
                if os.stat(job).st_mtime < since:
                    continue
            except OSError:
                continue
            for slot in range(slots):
                try:
                    if os.path.exists(os.path.join(job, host, "%d.sock" % slot)):
                        with open(os.path.join(job, host, "%d.pid" % slot)) as f:
                            found[(host, slot)] = int(f.read())
                except (OSError, ValueError):
                    pass  # taken by a rank meanwhile
    return found
