"""Elastic recovery time: 3 simulated hosts x 1 rank under tfringrun's
elastic mode, the launcher outside them; the last rank's process is
SIGKILLed at step 4 of tests/elastic_jobs/counter_job.py. Each run is made
with both recovery modes, in-process (MPI ULFM: the survivors shrink and go
on) and restart (the driver relaunches every rank from the in-memory mirror).
Prints, per run and mode, the seconds from the kill to: the driver's relaunch
on the 2 hosts left (restart only), the 2-rank world's START (restart: new
processes started, TensorFlow imported, init, state synced from the mirror;
in-process: the survivors shrunk and synced), and its first finished step;
and, for scale, how long the first world took from launch to its ranks' start.

    python benchmarks/elastic_recovery.py [--repeats 3] [--recovery in-process]   # as root
"""
import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

from multihost.elastic_runs import UNINTERRUPTED_TOTAL, first, lost_rank, text  # noqa: E402
from multihost.simulated_hosts import SimulatedHosts, namespaces_available  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--recovery", choices=("both", "in-process", "restart"), default="both")
    args = parser.parse_args()
    ok, why = namespaces_available()
    if not ok:
        sys.exit("elastic_recovery: " + why)
    modes = ["in-process", "restart"] if args.recovery == "both" else [args.recovery]
    rows = []
    for run in range(args.repeats):
        for mode in modes:  # alternating, so both see the same machine
            with SimulatedHosts(3) as hosts, tempfile.TemporaryDirectory() as tmp:
                rc, lines, t = lost_rank(hosts, tmp, recovery=mode)
            out = text(lines, "out")
            right = rc == 0 and out.count("total=%d" % UNINTERRUPTED_TOTAL) == 2
            launched, _ = first(lines, "tfringrun: elastic world 0")
            started = min(float(l.split("t=")[1]) for _, _, l in lines
                          if l.startswith("START") and "size=3" in l)
            rows.append((run + 1, mode, t.get("relaunch"), t.get("synced"), t.get("first_step"),
                         started - launched, "yes" if right else "NO (rc %d)" % rc))
            if not right:
                print(text(lines)[-4000:], file=sys.stderr)
    print("| run | recovery | kill -> relaunch (s) | kill -> 2-rank world synced (s) | kill -> "
          "first 2-rank step (s) | first world: launch -> ranks started (s) | ends 0 with the "
          "uninterrupted total |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print("| %d | %s | %s | %s | %s | %.1f | %s |" % (
            row[0], row[1], *("%.2f" % v if v else "-" for v in row[2:5]), row[5], row[6]))
    print("load average at the end: %.1f %.1f %.1f" % os.getloadavg())


if __name__ == "__main__":
    main()
