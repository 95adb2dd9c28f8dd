"""When the elastic test jobs kill a rank: COUNTER_KILL_RANK_AT="k" or
"k1,k2,..." (global steps) with COUNTER_MARKER=file. At each listed step the
last rank of the world at that time SIGKILLs itself, once per job: the i-th
kill writes its time to the marker (i = 0) or marker.i, and a marker that
exists means that kill already happened (also in a relaunched world).
COUNTER_KILL_WRAPPER_TOO=1: the rank takes its tfringrun wrapper (its
parent shell) down with it, as a container's OOM kill or `pkill` of the
job's processes does, so the wrapper cannot report the rank's end."""
import os
import time

_steps = [int(s) for s in os.environ.get("COUNTER_KILL_RANK_AT", "").split(",") if s.strip()]
_marker = os.environ.get("COUNTER_MARKER")


def marker_path(i):
    return _marker if i == 0 else "%s.%d" % (_marker, i)


def maybe_kill(step, rank, size):
    if not _marker or rank != size - 1:
        return
    for i, at in enumerate(_steps):
        path = marker_path(i)
        if step == at and not os.path.exists(path):
            with open(path, "w") as f:
                f.write("%.6f\n" % time.time())
            if os.environ.get("COUNTER_KILL_WRAPPER_TOO") == "1":
                os.kill(os.getppid(), 9)
            os.kill(os.getpid(), 9)
