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
import socket
import subprocess
import sys
import threading
import time

from tf_ring.run import warm_spares

SEED_WAIT_S = 60.0
# What a spare's imports may read from the environment. Never a secret:
# this goes on a command line, which other users of the host can see;
# the rank's whole environment reaches the spare at the hand-over.
_SEED_PREFIXES = ("PATH", "PYTHON", "LD_LIBRARY_PATH", "KERAS_", "TF_", "OMP_", "CUDA_")


def seed_command(env, slots, wait_s=SEED_WAIT_S):
    """The shell command that starts `slots` spares on a host and ends once they are ready."""
    kept = sorted((k, v) for k, v in env.items()
                  if k.startswith(_SEED_PREFIXES) and "SECRET" not in k and "TOKEN" not in k)
    return "env %s %s %s seed %s %d %g" % (
        " ".join("%s=%s" % (k, shlex.quote(v)) for k, v in kept), shlex.quote(sys.executable),
        shlex.quote(warm_spares.SCRIPT),
        shlex.quote(env[warm_spares.DIR_ENV]), slots, wait_s)


def remote_argv(args, host, command):
    """How mpirun would reach `host`: its agent (ssh unless --rsh-agent), or
    nothing for this machine."""
    if host in ("localhost", "127.0.0.1", socket.gethostname()):
        return ["sh", "-c", command]
    if getattr(args, "rsh_agent", None):
        return shlex.split(args.rsh_agent) + [host, command]
    port = ["-p", str(args.ssh_port)] if getattr(args, "ssh_port", None) else []
    return ["ssh", "-o", "BatchMode=yes"] + port + [host, command]


def seed_hosts(args, env, hosts, out, wait_s=SEED_WAIT_S):
    """Starts spares on every (host, slots) of `hosts` at once and waits
    for them; says on `out` what became ready. Returns the hosts that did."""
    began, ready = time.monotonic(), []

    def one(host, slots):
        try:
            done = subprocess.run(remote_argv(args, host, seed_command(env, slots, wait_s)),
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
