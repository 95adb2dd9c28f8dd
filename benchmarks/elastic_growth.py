"""Elastic growth time: a host appears in the discovery output and the job
goes on at the larger size. 3 simulated hosts x 1 rank, tfringrun's elastic
mode outside them, tests/elastic_jobs/counter_job.py (30 committed steps);
discovery lists 2 hosts, and the third is added when rank 0 reports step 5.
Prints, per run, seconds from the host appearing to: the 2-rank world
leaving at its next commit (the driver polls discovery about once a second,
tells rank 0, every rank raises HostsUpdatedInterrupt at the next commit and
exits), the driver's relaunch at 3 ranks, the new processes having begun
(mpirun starting them on the 3 hosts), init() returned (TensorFlow imported,
the engine joined), the state synced from the mirror, and the first 3-rank
step; and how long training paused (the last 2-rank step to the first
3-rank one). --warm-spares runs restart mode side by side without and with
`tfringrun --warm-spares` (the job at 0.5 s a step, the host added once the
first two hosts hold ready spares): with spares the driver starts the added
host's spare and tells rank 0 only once it is ready, so the host appears
well before the growth but the pause is short.

    python benchmarks/elastic_growth.py [--repeats 3] [--recovery restart] [--warm-spares]  # as root
"""
import argparse
import os
import re
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

from multihost.elastic_runs import (UNINTERRUPTED_TOTAL, first, ready_spares,  # noqa: E402
                                    run_counter, text)
from multihost.simulated_hosts import SimulatedHosts, namespaces_available  # noqa: E402


def grow_once(recovery, warm=None):
    """warm: None (the plain run), False or True (0.5 s steps, without or with --warm-spares)."""
    began = time.time() - 1
    with SimulatedHosts(3) as hosts, tempfile.TemporaryDirectory() as tmp:
        listed = os.path.join(tmp, "hosts")
        with open(listed, "w") as f:
            f.write("simhost0\nsimhost1\n")
        discovery = os.path.join(tmp, "grow.sh")
        with open(discovery, "w") as f:
            f.write("#!/bin/sh\ncat %s\n" % listed)
        os.chmod(discovery, 0o755)
        appeared = {}

        def add_host(line):
            step = re.match(r"STEP rank=0 size=2 step=(\d+) ", line)
            if appeared or not step or int(step.group(1)) < 5:
                return
            if warm and len(ready_spares(hosts, ["simhost0", "simhost1"], began)) < 2:
                return
            with open(listed, "w") as f:
                f.write("simhost0\nsimhost1\nsimhost2\n")
            appeared["at"] = time.time()

        rc, lines = run_counter(hosts, tmp, min_np=2, recovery=recovery, on_line=add_host,
                                job_env={} if warm is None else {"COUNTER_STEP_S": "0.5"},
                                discovery=discovery, extra_args=["--warm-spares"] if warm else [])
    at = appeared.get("at", 0.0)
    left, _ = first(lines, "tfringrun: hosts were added; restarting", at)
    relaunch, _ = first(lines, "tfringrun: elastic world 1", at)

    def stamps(pattern):
        return [float(v) for _, _, l in lines for v in re.findall(pattern, l)]

    booted = stamps(r"BOOT rank=\d size=3 booted=([0-9.]+)")
    initialized = stamps(r"BOOT rank=\d size=3 booted=[0-9.]+ initialized=([0-9.]+)")
    synced = stamps(r"START rank=\d size=3 .*t=([0-9.]+)")
    step = stamps(r"STEP rank=\d size=3 step=\d+ t=([0-9.]+)")
    right = rc == 0 and text(lines, "out").count("total=%d" % UNINTERRUPTED_TOTAL) == 3
    small = stamps(r"STEP rank=\d size=2 step=\d+ t=([0-9.]+)")
    points = [left, relaunch, booted and max(booted), initialized and max(initialized),
              synced and max(synced), step and max(step[:3])]
    paused = step and small and max(step[:3]) - max(small)
    warm_ranks = len(re.findall(r"BOOT rank=\d size=3 .* warm=1", text(lines, "out")))
    return [p - at if p else None for p in points] + [paused], right, lines, warm_ranks


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--recovery", choices=("in-process", "restart"), default="in-process")
    parser.add_argument("--warm-spares", action="store_true")
    args = parser.parse_args()
    if args.warm_spares:
        args.recovery = "restart"
    ok, why = namespaces_available()
    if not ok:
        sys.exit("elastic_growth: " + why)
    print("| run | spares | 2-rank world left | relaunched | processes began | init() returned | "
          "state synced | first 3-rank step | training paused | warm ranks | ends 0 with the "
          "uninterrupted total |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for run in range(args.repeats):
        for warm in ((False, True) if args.warm_spares else (None,)):
            times, right, lines, warm_ranks = grow_once(args.recovery, warm)
            if not right:
                print(text(lines)[-4000:], file=sys.stderr)
            print("| %d | %s | %s | %d of 3 | %s |" % (
                run + 1, "warm" if warm else "none",
                " | ".join("%.2f" % t if t is not None else "-" for t in times), warm_ranks,
                "yes" if right else "NO"), flush=True)
    print("(seconds after the host appeared in the discovery output; --recovery %s; load "
          "average at the end: %.1f %.1f %.1f)" % ((args.recovery,) + os.getloadavg()))


if __name__ == "__main__":
    main()
