"""Issue 51's speed figures, quiet and under a controlled load, side by side
in one run, each goal printed next to its ratio.

Conditions, alternated `--rounds` times so the machine's drift lands on both:

- quiet: nothing else of this script's runs (the machine's own busy share
  is measured and printed before each phase; `--wait-quiet S` first waits
  up to S seconds for the CPUs to be idle);
- one core busy: one more process spinning in a loop beside the ranks, on
  the same cores (not pinned: the scheduler places it, as it places a data
  loader or a logging thread).

Figures (benchmarks/figures.py for the first three, tf_ring against its
baseline on the same buffers in the same job):

- one 64 MB allreduce, against mpi4py's `Allreduce`;
- 160 gradients in one `tf.function` (grouped allreduce), against 160
  mpi4py calls: read inside the function, as a training step has them, and
  (no goal) passed in as 160 arguments, which adds TensorFlow's binding of
  each argument;
- a lone 4 KB eager allreduce, against a TensorFlow eager `tf.identity`;
- 64 MB across 2 simulated hosts (2 ranks each, links shaped to 2 Gbit/s),
  against the link floor (needs root and network namespaces; skipped
  otherwise, saying why);
- Keras `model.fit` fed by a `tf.data` pipeline with a parallel map on the
  same cores (benchmarks/keras_fit.py --pipeline): tf_ring (Keras 3)
  against `MultiWorkerMirroredStrategy` (`tf_keras`), samples/s.

    python benchmarks/under_load.py                 # everything, 2 rounds
    python benchmarks/under_load.py --skip-hosts --skip-keras --rounds 3
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CONDITIONS = ("quiet", "one core busy")

# (key, label, goal quiet, goal loaded, higher_is_better). Ratios are
# baseline / tf_ring for speedups, tf_ring / baseline for costs.
ROWS = [
    ("64mb", "64 MB allreduce, speedup over mpi4py", 1.5, 1.0, True),
    ("step", "160 gradients in one tf.function, time / 160 mpi4py calls", 1.0, 1.2, False),
    ("step_args", "the same, the 160 passed in as tf.function arguments", None, None, False),
    ("4kb", "lone 4 KB eager op, time / tf.identity", 2.0, None, False),
    ("hosts", "64 MB across 2 simulated hosts, time / link floor", 1.2, 1.5, False),
    ("keras", "Keras fit with tf.data map, tf_ring / MWMS samples/s", None, None, True),
]


def cpu_busy_share(seconds=1.0):
    """The share of all CPUs busy over `seconds` (from /proc/stat; a VM's
    stolen time counts as busy), and the 1-minute load average: what else
    the machine was doing."""
    def sample():
        with open("/proc/stat") as f:
            fields = [float(x) for x in f.readline().split()[1:]]
        idle = fields[3] + fields[4]
        return sum(fields), idle
    total0, idle0 = sample()
    time.sleep(seconds)
    total1, idle1 = sample()
    busy = 1.0 - (idle1 - idle0) / max(total1 - total0, 1e-9)
    with open("/proc/loadavg") as f:
        load = float(f.read().split()[0])
    return busy, load


def wait_quiet(max_seconds, threshold=0.1):
    deadline = time.time() + max_seconds
    busy, load = cpu_busy_share()
    while busy > threshold and time.time() < deadline:
        time.sleep(4)
        busy, load = cpu_busy_share()
    return busy, load


class BusyCore(object):
    """One process keeping one core busy while the block runs."""

    def __enter__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        time.sleep(1.0)  # running before the ranks start
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()
        return False


def run_ranks(cmd, env=None, timeout=900):
    """Runs `cmd` and returns its stdout; raises with its tail on failure."""
    proc = subprocess.run(cmd, cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError("%s failed (exit %d):\n%s" % (" ".join(cmd), proc.returncode, proc.stdout[-3000:]))
    return proc.stdout


def tagged_json(output, tag):
    lines = [l for l in output.splitlines() if l.startswith(tag + " ")]
    if not lines:
        raise RuntimeError("no %s line in:\n%s" % (tag, output[-3000:]))
    return json.loads(lines[-1].split(" ", 1)[1])


def launcher(np_):
    return [sys.executable, "-m", "tf_ring.run", "-np", str(np_)]


def figure_ratio(key, fig):
    """The goal's ratio of one figure result (see ROWS)."""
    if key == "64mb":
        return fig["theirs"] / fig["ours"]
    return fig["ours"] / fig["theirs"]


def engine_figures(args, env):
    out = run_ranks(launcher(args.np) + [sys.executable, "figures.py", "--blocks", str(args.blocks)], env)
    return tagged_json(out, "FIGURES")


def keras_figure(args, env):
    out = run_ranks(launcher(args.np) + [sys.executable, "keras_fit.py", "--pipeline", "--steps",
                                         str(args.keras_steps), "--windows", "3"], env)
    rates = tagged_json(out, "KERAS_FIT")
    ours = rates["tf_ring, Keras 3"]
    theirs = rates["MultiWorkerMirroredStrategy, tf_keras"]
    return {"ours": ours, "theirs": theirs}


def hosts_available():
    sys.path.insert(0, os.path.join(REPO, "tests"))
    try:
        from multihost.simulated_hosts import namespaces_available
    except ImportError as e:
        return False, str(e)
    return namespaces_available()


def hosts_figure(hosts, args, env):
    cmd = ([sys.executable, "-m", "tf_ring.run"] + hosts.launcher_args(2)
           + [sys.executable, os.path.join(HERE, "figures.py"), "--only", "hosts", "--blocks", "3"])
    proc = subprocess.run(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError("hosts run failed (exit %d):\n%s" % (proc.returncode, proc.stdout[-3000:]))
    return tagged_json(proc.stdout, "FIGURES")["hosts"]


def phase(name, condition, fn, args, results, notes):
    """Runs one figure under one condition, recording the machine's state."""
    if condition == "quiet" and args.wait_quiet > 0:
        busy, load = wait_quiet(args.wait_quiet)
    else:
        busy, load = cpu_busy_share()
    started = time.time()
    try:
        if condition == "quiet":
            value = fn()
        else:
            with BusyCore():
                value = fn()
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        notes.append("%s, %s: failed: %s" % (name, condition, str(e).strip().splitlines()[0][:300]))
        return
    results.setdefault((name, condition), []).append(dict(value, busy_before=busy, load_before=load,
                                                          seconds=time.time() - started))
    print("  %-6s %-14s busy before %3.0f%% load %.2f: %s" % (name, condition, 100 * busy, load,
                                                            describe_one(name, value)), flush=True)


def describe_one(key, value):
    if key == "engine":
        return "; ".join("%s %s" % (k, describe_one(k, value[k])) for k in ("64mb", "step", "step_args", "4kb"))
    if key == "keras":
        return "tf_ring %.0f samples/s, MWMS %.0f (%.2fx)" % (value["ours"], value["theirs"],
                                                           value["ours"] / value["theirs"])
    unit, scale = ("us", 1e6) if key == "4kb" else ("ms", 1e3)
    return "tf_ring %.1f %s, baseline %.1f %s: %.2fx" % (value["ours"] * scale, unit, value["theirs"] * scale,
                                                       unit, figure_ratio(key, value))


def met(ratio, goal, higher):
    if goal is None:
        return ""
    ok = ratio >= goal if higher else ratio <= goal
    return " met" if ok else " NOT met"


def table(results):
    header = ["figure", "goal quiet", "quiet", "goal, one core busy", "one core busy"]
    rows = []
    for key, label, goal_quiet, goal_loaded, higher in ROWS:
        cells = [label]
        for condition, goal in zip(CONDITIONS, (goal_quiet, goal_loaded)):
            runs = results.get((key, condition), [])
            sign = ">=" if higher else "<="
            cells.append("-" if goal is None else "%s %.1fx" % (sign, goal))
            if not runs:
                cells.append("not run")
                continue
            if key == "keras":
                ratios = [r["ours"] / r["theirs"] for r in runs]
            else:
                ratios = [figure_ratio(key, r) for r in runs]
            median = statistics.median(ratios)
            spread = "" if len(ratios) == 1 else " (%.2f-%.2f)" % (min(ratios), max(ratios))
            loads = "; busy %s%%" % "/".join("%.0f" % (100 * r["busy_before"]) for r in runs)
            cells.append("%.2fx%s%s%s" % (median, spread, met(median, goal, higher), loads))
        rows.append(cells)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print("\n" + " | ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("-+-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(c.ljust(w) for c, w in zip(r, widths)))
    print("\nRatios are medians over the rounds (range in brackets); 'busy' is the share of the CPUs "
          "other work used in the second before each run (the busy process is started after it).")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--blocks", type=int, default=5, help="figures.py blocks per run")
    parser.add_argument("--keras-steps", type=int, default=30, help="timed steps per Keras window")
    parser.add_argument("--wait-quiet", type=float, default=0,
                        help="before each quiet run, wait up to this many seconds for idle CPUs")
    parser.add_argument("--skip-hosts", action="store_true")
    parser.add_argument("--skip-keras", action="store_true")
    parser.add_argument("--json", help="also write every run's results here")
    args = parser.parse_args()
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, env.get("PYTHONPATH")) if p)
    results, notes = {}, []
    for round_ in range(args.rounds):
        print("round %d of %d" % (round_ + 1, args.rounds), flush=True)
        for condition in CONDITIONS:
            phase("engine", condition, lambda: engine_figures(args, env), args, results, notes)
            engine = results.pop(("engine", condition), [None])[-1]
            if engine is not None:
                for key in ("64mb", "step", "step_args", "4kb"):
                    results.setdefault((key, condition), []).append(
                        dict(engine[key], busy_before=engine["busy_before"], load_before=engine["load_before"]))
        if not args.skip_keras:
            for condition in CONDITIONS:
                phase("keras", condition, lambda: keras_figure(args, env), args, results, notes)
    if not args.skip_hosts:
        ok, why = hosts_available()
        if not ok:
            notes.append("64 MB across hosts: skipped (%s)" % why)
        else:
            from multihost.simulated_hosts import SimulatedHosts
            with SimulatedHosts(2, rate="2gbit") as hosts:
                for _ in range(args.rounds):
                    for condition in CONDITIONS:
                        phase("hosts", condition, lambda: hosts_figure(hosts, args, env), args, results, notes)
    table(results)
    for note in notes:
        print("note: " + note)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"%s|%s" % k: v for k, v in results.items()}, f, indent=1, default=str)


if __name__ == "__main__":
    main()
