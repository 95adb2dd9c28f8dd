"""What a loss costs in each recovery mode, side by side (docs/elastic.md):
--recovery restart without and with warm spares (tfringrun --warm-spares)
and --recovery in-process, on 3 simulated hosts x 1 rank, each host with
its own /dev/shm and /tmp, the launcher outside them,
tests/elastic_jobs/counter_job.py at 0.5 s a step.
At rank 0's first step on or after step 12 at which every host holds a
ready spare (at once when the run has none), either the last rank's process
is SIGKILLed, or its whole host is killed (its rank, its Open MPI daemon and
its spare), or its host's link goes down silently (with --detection-timeout
5 in every run: "silent"). Prints, per run, the seconds from the kill to the driver's
relaunch on the 2 hosts left (none in-process when the survivors go on),
to the 2-rank world's START (restart: processes started, TensorFlow
imported, init, state synced from the mirror; in-process: the survivors
shrunk and synced) and to its first finished step; and the first world's
launch -> ranks initialized, which the spares' imports beside it may slow.

    python benchmarks/elastic_warm_restart.py [--repeats 3] [--kill rank host silent]
        [--modes restart warm in-process]   # as root
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

from multihost.elastic_runs import (UNINTERRUPTED_TOTAL, first, ready_spares,  # noqa: E402
                                    run_counter, text)
from multihost.simulated_hosts import SimulatedHosts, namespaces_available  # noqa: E402

KILL_FROM_STEP = 12


MODES = {"restart": ("restart", False), "warm": ("restart", True),
         "in-process": ("in-process", False)}


def one_run(mode, what):
    recovery, warm = MODES[mode]
    began = time.time() - 1
    with SimulatedHosts(3) as hosts, tempfile.TemporaryDirectory() as tmp:
        killed, rank_pids = {}, {}

        def kill(line):
            step = re.match(r"STEP rank=0 size=3 step=(\d+) ", line)
            if killed or not step or int(step.group(1)) < KILL_FROM_STEP:
                return
            if warm and len(ready_spares(hosts, hosts.hostnames, began)) < 3:
                return
            killed["at"] = time.time()
            if what == "host":
                hosts.kill_host("simhost2")
            elif what == "silent":
                subprocess.run(["ip", "link", "set", hosts.netns("simhost2"), "down"], check=True)
            else:
                os.kill(rank_pids["2"], 9)

        def on_line(line):
            started = re.match(r"START rank=(\d) size=3 step=\d+ pid=(\d+)", line)
            if started:
                rank_pids[started.group(1)] = int(started.group(2))
            kill(line)

        rc, lines = run_counter(hosts, tmp, min_np=2, job_env={"COUNTER_STEP_S": "0.5"},
                                on_line=on_line, recovery=recovery,
                                extra_args=(["--warm-spares"] if warm else []) +
                                (["--detection-timeout", "5"] if what == "silent" else []))
    out = text(lines, "out")
    right = rc == 0 and out.count("total=%d" % UNINTERRUPTED_TOTAL) == 2 and bool(killed)
    if not right:
        print(text(lines)[-4000:], file=sys.stderr)
        return None
    at = killed["at"]
    relaunch, _ = first(lines, "tfringrun: elastic world 1", at)
    start = min(t for t, _, l in lines if l.startswith("START") and "size=2 " in l)
    first_steps = {}
    for t, _, line in lines:
        size2 = re.match(r"STEP rank=(\d) size=2 ", line)
        if size2 and t >= at:
            first_steps.setdefault(size2.group(1), t)
    step = max(first_steps.values())  # every survivor has finished a step
    launched, _ = first(lines, "tfringrun: elastic world 0")
    initialized = max(float(b) for b in re.findall(r"BOOT rank=\d size=3 .*initialized=([0-9.]+)", out))
    warm_ranks = len(re.findall(r"BOOT rank=\d size=2 .* warm=1", out))
    return (relaunch and relaunch - at, start - at, step - at, initialized - launched, warm_ranks)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kill", nargs="+", choices=("rank", "host", "silent"),
                        default=["rank", "host", "silent"])
    parser.add_argument("--modes", nargs="+", choices=sorted(MODES),
                        default=["restart", "warm", "in-process"])
    args = parser.parse_args()
    ok, why = namespaces_available()
    if not ok:
        sys.exit("elastic_warm_restart: " + why)
    print("| run | killed | recovery | kill -> relaunch (s) | kill -> 2-rank world synced (s) | "
          "kill -> first 2-rank step (s) | first world: launch -> ranks initialized (s) | "
          "warm ranks after |")
    print("|---|---|---|---|---|---|---|---|")
    for run in range(args.repeats):
        for what in args.kill:
            for mode in args.modes:  # side by side, so all see the same machine
                row = one_run(mode, what)
                if row is None:
                    sys.exit("elastic_warm_restart: a run went wrong (its output is above)")
                relaunch = "-" if row[0] is None else "%.2f" % row[0]
                print("| %d | %s | %s | %s | %.2f | %.2f | %.1f | %d of 2 |"
                      % ((run + 1, what, mode, relaunch) + row[1:]), flush=True)
    print("load average at the end: %.1f %.1f %.1f" % os.getloadavg())


if __name__ == "__main__":
    main()
