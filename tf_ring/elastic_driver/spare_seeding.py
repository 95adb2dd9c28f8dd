"""Warm spares on a host the discovery script adds (tfringrun --warm-spares).

Growth is a restart at the next commit; without a spare on the added host
its new ranks start cold, importing TensorFlow while every other rank
waits in the new world. So before the driver tells rank 0 about added
slots, it starts that host's spares through the agent mpirun itself uses
to reach hosts (ssh, or --rsh-agent) and waits until they are ready: the
job trains on at its old size meanwhile, and grows warm. Spares that are
not ready within SEED_WAIT_S seconds leave the growth cold, as without
the flag.
"""
import shlex
import subprocess
import sys
import threading
import time

from tf_ring.plumbing import env_names, host_agent
from tf_ring.elastic_driver import warm_spares

SEED_WAIT_S = 60.0
# What a spare's interpreter and imports (Python, TensorFlow, Keras, OpenMP,
# tf_ring, the spare itself) read when they start, by exact name; what is
# read later comes with the rank's environment at the hand-over. Nothing
# else: this goes on a command line, which every user of both hosts sees in
# `ps` (a blanket TF_* once showed Terraform's TF_VAR_db_password there).
SEED_VARIABLES = (
    "PATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV",
    # read once, at the interpreter's start
    "PYTHONPATH", "PYTHONHOME", "PYTHONNOUSERSITE", "PYTHONUSERBASE", "PYTHONHASHSEED",
    "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONIOENCODING", "PYTHONUTF8",
    "PYTHONWARNINGS", "PYTHONOPTIMIZE", "PYTHONFAULTHANDLER", "PYTHONSAFEPATH",
    # read when TensorFlow, Keras and their thread pools load
    "TF_CPP_MIN_LOG_LEVEL", "TF_CPP_MAX_VLOG_LEVEL", "TF_CPP_VMODULE", "TF_USE_LEGACY_KERAS",
    "TF_ENABLE_ONEDNN_OPTS", "TF_NUM_INTEROP_THREADS", "TF_NUM_INTRAOP_THREADS",
    "KERAS_BACKEND", "KERAS_HOME", "OMP_NUM_THREADS", "OMP_PROC_BIND", "OMP_PLACES",
    "KMP_AFFINITY", "KMP_BLOCKTIME", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
    env_names.LOG_LEVEL, env_names.SPARE_IMPORTS, env_names.SPARE_IDLE_S)


def seed_command(env, slots, wait_s=SEED_WAIT_S):
    """The shell command that starts `slots` spares on a host and ends once they are ready."""
    kept = sorted((k, env[k]) for k in SEED_VARIABLES if k in env)
    return "env %s %s %s seed %s %d %g" % (
        " ".join("%s=%s" % (k, shlex.quote(v)) for k, v in kept), shlex.quote(sys.executable),
        shlex.quote(warm_spares.SCRIPT),
        shlex.quote(env[env_names.SPARE_DIR]), slots, wait_s)


def remote_argv(job, host, command):
    """How mpirun would reach `host`: its agent (ssh unless --rsh-agent), or
    nothing for this machine."""
    if host_agent.is_this_machine(host):
        return ["sh", "-c", command]
    return host_agent.agent_argv(host, command, job.rsh_agent, job.ssh_port)


def seed_hosts(job, env, hosts, out, wait_s=SEED_WAIT_S):
    """Starts spares on every (host, slots) of `hosts` at once and waits
    for them; says on `out` what became ready. Returns the hosts that did."""
    began, ready = time.monotonic(), []

    def one(host, slots):
        try:
            done = subprocess.run(remote_argv(job, host, seed_command(env, slots, wait_s)),
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, timeout=wait_s + 30)
        except (OSError, subprocess.TimeoutExpired) as e:
            print("tfringrun: warm spares on %s: %s; its ranks start cold" % (host, e), file=out)
            return
        if done.returncode == 0:
            ready.append(host)
        else:
            said = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
            print("tfringrun: warm spares on %s were not ready within %g s%s; its ranks start "
                  "cold" % (host, wait_s, ": " + said[0] if said[0] else ""), file=out)

    threads = [threading.Thread(target=one, args=(h, s), daemon=True) for h, s in hosts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if ready:
        print("tfringrun: warm spares ready on %s after %.1f s"
              % (", ".join(sorted(ready)), time.monotonic() - began), file=out)
    return ready
