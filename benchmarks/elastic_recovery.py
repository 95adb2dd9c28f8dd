"""Elastic recovery time: 3 simulated hosts x 1 rank under tfringrun's
elastic mode (coordinated restart), the launcher outside them; the last
rank's process is SIGKILLed at step 4 of tests/elastic_jobs/counter_job.py.
Prints, per run, the seconds from the kill to: the driver relaunching on the
2 hosts left, the new world's ranks having started (process start, TensorFlow
import, init, state synced from the host-tmpfs mirror), and their first
finished step; and, for scale, how long the first world took from launch to
its ranks' start.

    python benchmarks/elastic_recovery.py [--repeats 3]   # as root
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
    args = parser.parse_args()
    ok, why = namespaces_available()
    if not ok:
        sys.exit("elastic_recovery: " + why)
    rows = []
    for run in range(args.repeats):
        with SimulatedHosts(3) as hosts, tempfile.TemporaryDirectory() as tmp:
            rc, lines, t = lost_rank(hosts, tmp)
        out = text(lines, "out")
        right = rc == 0 and out.count("total=%d" % UNINTERRUPTED_TOTAL) == 2
        launched, _ = first(lines, "tfringrun: elastic world 0")
        started = min(float(l.split("t=")[1]) for _, _, l in lines
                      if l.startswith("START") and "size=3" in l)
        rows.append((run + 1, t.get("relaunch"), t.get("synced"), t.get("first_step"),
                     started - launched, "yes" if right else "NO (rc %d)" % rc))
        if not right:
            print(text(lines)[-4000:], file=sys.stderr)
    print("| run | kill -> relaunch (s) | kill -> ranks started and synced (s) | kill -> first "
          "2-rank step (s) | first world: launch -> ranks started (s) | ends 0 with the "
          "uninterrupted total |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print("| %d | %s | %s | %s | %.1f | %s |" % (row[0], *("%.1f" % v if v else "-" for v in row[1:4]),
                                                    row[4], row[5]))
    print("load average at the end: %.1f %.1f %.1f" % os.getloadavg())


if __name__ == "__main__":
    main()
