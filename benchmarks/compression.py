"""Gradient compression across a slow link: Keras 3 fit of a wide MLP on
scikit-learn's digits (8.5 M parameters: 34.2 MB of float32 gradients a
step), with compression none, fp16, bf16 and powersgd, in one run:

  1. 2 simulated hosts x 1 rank, each host's link shaped to 1 Gbit/s each way
     (tests/multihost/simulated_hosts.py): step time, time to the target
     accuracy, final accuracy; and one raw mpi4py Allreduce of the same
     34.2 MB (what "none" must send, the floor of its step);
  2. one host, 2 ranks (shared memory): what compression costs where the
     link is fast;
  3. the memory PowerSGD adds: its state (Q factors, residuals; exact
     bytes) and the peak resident memory of a rank, against none.

Each choice trains in a job of its own (the same starting point for its
timings and its peak memory); the tables come at the end.

    python benchmarks/compression.py      # as root, under the heavy lock
    python benchmarks/compression.py --help; python benchmarks/compression_worker.py --help

Data: sklearn.datasets.load_digits (1,797 8x8 images, shipped with
scikit-learn), the last 20% held out; the same shuffled order on every rank,
each rank training on its half of each global batch. Every configuration
starts from the same weights; every rank must end with equal weights.
Goal (issue 50): powersgd >= 3x faster steps than none across the link,
bf16 >= 1.7x, at equal accuracy.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CHOICES = ["none", "fp16", "bf16", "powersgd"]
HEADER = ["compression", "step ms", "speedup", "epochs to target", "s to target", "final acc %",
          "peak RSS MB", "loadavg (1 min) before/after"]


def run_choices(launcher, worker, choices, env, timeout):
    """{choice: the RESULT of its own tfringrun job}."""
    results = {}
    for choice in choices:
        out = subprocess.run(launcher + worker + ["--choice", choice], cwd=REPO, env=env,
                             timeout=timeout, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True).stdout
        lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
        if not lines:
            sys.exit("compression benchmark: the %s job gave no result:\n%s"
                     % (choice, out[-6000:]))
        results[choice] = json.loads(lines[0][len("RESULT "):])
    return results


def print_table(title, results):
    base = results["none"]["step_s"] if "none" in results else None
    rows = []
    for choice, r in results.items():
        reached = r["reached"]
        rows.append([choice, "%.1f" % (r["step_s"] * 1e3),
                     "%.2fx" % (base / r["step_s"]) if base else "",
                     "-" if reached is None else str(reached[0]),
                     "-" if reached is None else "%.1f" % reached[1],
                     "%.1f" % (100 * r["final_accuracy"]), "%.0f" % r["peak_rss_mb"],
                     "%s / %s" % (r["load_before"].split()[0], r["load_after"].split()[0])])
    if "none" in results:
        none = results["none"]
        rows.append(["mpi4py Allreduce of %.1f MB alone" % none["gradient_mb"],
                     "%.1f" % (none["mpi4py_allreduce_s"] * 1e3)] + [""] * (len(HEADER) - 2))
    widths = [max(len(h), *(len(str(row[i])) for row in rows)) for i, h in enumerate(HEADER)]
    print("\n" + title)
    print(" | ".join(h.rjust(w) for h, w in zip(HEADER, widths)))
    print("-+-".join("-" * w for w in widths))
    for row in rows:
        print(" | ".join(str(c).rjust(w) for c, w in zip(row, widths)))
    if "powersgd" in results and "none" in results:
        p, n = results["powersgd"], results["none"]
        print("powersgd state: %.1f MB (Q factors and residuals; %.1f MB of float32 gradients); "
              "peak RSS %+.0f MB against none" % (p["state_mb"], n["gradient_mb"],
                                                  p["peak_rss_mb"] - n["peak_rss_mb"]))
    sys.stdout.flush()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", default="1gbit", help="tc rate of each host's link")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--one-host-epochs", type=int, default=2,
                        help="epochs of the one-host run (0: skip it)")
    parser.add_argument("--choices", default=",".join(CHOICES),
                        help="comma-separated, from " + ",".join(CHOICES))
    parser.add_argument("--timeout", type=int, default=900, help="seconds for each job")
    args, worker_args = parser.parse_known_args()  # the rest: compression_worker.py's
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from multihost.simulated_hosts import SimulatedHosts, namespaces_available
    ok, why = namespaces_available()
    if not ok:
        sys.exit("compression benchmark: " + why)
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
    worker = [sys.executable, os.path.join(HERE, "compression_worker.py")] + worker_args
    choices = args.choices.split(",")
    what = "Keras 3 fit, MLP 3x2048 on digits, 32 a batch per rank, %s" % (
        " ".join(worker_args) or "powersgd rank 4 after 22 uncompressed steps, target 97%")
    with SimulatedHosts(2, rate=args.rate) as hosts:
        launcher = [sys.executable, "-m", "tf_ring.run"] + hosts.launcher_args(1)
        results = run_choices(launcher, worker + ["--epochs", str(args.epochs)], choices, env,
                              args.timeout)
    print_table("2 hosts x 1 rank, each host's link shaped to %s; %s, %d epochs; step = median "
                "batch time after the first epoch" % (args.rate, what, args.epochs), results)
    if args.one_host_epochs:
        launcher = [sys.executable, "-m", "tf_ring.run", "-np", "2"]
        results = run_choices(launcher, worker + ["--epochs", str(args.one_host_epochs)],
                              choices, env, args.timeout)
        print_table("one host x 2 ranks (shared memory); %s, %d epochs"
                    % (what, args.one_host_epochs), results)


if __name__ == "__main__":
    main()
