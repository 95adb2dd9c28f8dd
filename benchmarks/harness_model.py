"""Scaling model checked on the simulated hosts: fit an alpha-beta model of
each allreduce path on 1 and 2 hosts, predict 3 hosts, then measure them.

    python benchmarks/harness_model.py            # as root (network namespaces)

Each host runs 2 ranks; each host's link is shaped to 2 Gbit/s each way
(tests/multihost/simulated_hosts.py). Three jobs run one after the other:

1. 1 host: tf_ring's shared-memory allreduce, fitted as
   t_shm(N) = a_shm + N / B_shm.
2. 2 hosts: the hierarchical path (shared memory inside each host, one ring
   across hosts per local rank's slice, the slices sharing the host's link)
   and the flat path (TF_RING_HIERARCHICAL=0: one MPI allreduce over all 4
   ranks, ordered host by host). Fitted as
   t_hier(N, H) = t_shm(N) + 2(H-1) * (a_net + N / (H * B_net))
   t_flat(N, p) = 2(p-1) * (a_flat + N / (p * B_flat)),   p = 2H ranks.
3. The predictions for 3 hosts are printed (and written to --predictions)
   before the 3-host job starts; then it measures the same sizes and the
   table puts each prediction next to its measurement.

Every allreduce is tf_ring's eager op on float32, timed as the slowest
rank's median; the floor column is what the link alone needs: each host's
NIC moves 2(H-1)/H * N bytes each way at 2 Gbit/s.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from scaling_model import fit_ring, least_squares_2, ring_allreduce_s  # noqa: E402

RANKS_PER_HOST = 2
HIERARCHICAL_CHUNK = 4 << 20
MODELS = ("ring", "shared")
SHM_SIZES = [64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
HIER_SIZES = [64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
MPI_RING_SIZES = [4 << 20, 32 << 20]
FLAT_SIZES = [64 << 10, 1 << 20, 4 << 20, 16 << 20]  # flat 64 MB thrashes the link for minutes


def link_bytes_per_s(rate):
    units = {"gbit": 1e9 / 8, "mbit": 1e6 / 8}
    for suffix, scale in units.items():
        if rate.endswith(suffix):
            return float(rate[:-len(suffix)]) * scale
    raise ValueError("rate must end in gbit or mbit: %r" % rate)


# -- the job on the simulated hosts ------------------------------------------
def work(args):
    import numpy as np
    import tensorflow as tf

    import tf_ring as hvd
    from bench_util import timed

    def measure(label, sizes):
        points = []
        for size in sizes:
            data = np.random.default_rng(hvd.rank()).random(size // 4, dtype=np.float32)
            tensor = tf.constant(data)
            reps = args.repeats if size < (16 << 20) else max(3, args.repeats // 2)
            t, _ = timed(lambda: hvd.allreduce(tensor, op=hvd.Sum, name=label).numpy(), reps, warmup=1)
            out = hvd.allreduce(tensor, op=hvd.Sum, name=label).numpy()
            # The timing counts only if the sum is right (every rank's input is known).
            expected = sum(np.random.default_rng(r).random(size // 4, dtype=np.float32).astype(np.float64)
                           for r in range(hvd.size()))
            np.testing.assert_allclose(out, expected, rtol=1e-5)
            points.append((size, t))
        return points

    hvd.init()
    results = {"hosts": hvd.cross_size(), "ranks": hvd.size()}
    if hvd.cross_size() == 1:
        results["shm"] = measure("shm", SHM_SIZES)
    else:
        before = hvd.stats()["hierarchical_batches"]
        results["hierarchical"] = measure("hier", HIER_SIZES)
        assert hvd.stats()["hierarchical_batches"] > before, "the hierarchical path did not run"
        hvd.shutdown()
        os.environ["TF_RING_HIERARCHICAL"] = "0"
        hvd.init()
        results["flat"] = measure("flat", FLAT_SIZES)
        results["mpi4py_rings"] = measure_mpi_rings(args.repeats)
    if hvd.rank() == 0:
        print("RESULT " + json.dumps(results), flush=True)


def measure_mpi_rings(repeats):
    """The harness alone: mpi4py Allreduce over one communicator per local
    rank, one rank per host in each, all at once (the rings the hierarchical
    path runs across hosts), without TensorFlow or tf_ring."""
    import numpy as np
    from mpi4py import MPI

    import tf_ring as hvd
    from bench_util import timed
    cross = MPI.COMM_WORLD.Split(hvd.local_rank(), hvd.rank())
    points = []
    for size in MPI_RING_SIZES:
        data = np.ones(size // 4, np.float32)
        out = np.empty_like(data)
        t, _ = timed(lambda: cross.Allreduce(data, out, op=MPI.SUM), repeats, warmup=1)
        assert np.all(out == cross.Get_size())
        points.append((size, t))
    cross.Free()
    return points


# -- the driver --------------------------------------------------------------
def run_job(hosts, args):
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from multihost.simulated_hosts import SimulatedHosts
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_RING_HIERARCHICAL", None)
    with SimulatedHosts(hosts, rate=args.rate) as sim:
        cmd = ([sys.executable, "-m", "tf_ring.run"] + sim.launcher_args(RANKS_PER_HOST)
               + [sys.executable, os.path.abspath(__file__), "--worker", "--repeats", str(args.repeats)])
        started = time.time()
        proc = subprocess.run(cmd, cwd=REPO, env=env, timeout=args.timeout, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, universal_newlines=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        sys.exit("the %d-host job failed (exit %d):\n%s" % (hosts, proc.returncode, proc.stdout[-4000:]))
    print("(%d hosts x %d ranks: %.0f s)" % (hosts, RANKS_PER_HOST, time.time() - started), flush=True)
    return json.loads(lines[-1][len("RESULT "):])


def fit_line(points):
    """(a, B) of t = a + N / B by least squares on the relative error."""
    a, inverse_b = least_squares_2([(1.0 / t, n / t) for n, t in points])
    return a, 1.0 / inverse_b


def chunks(nbytes):
    """Cross-host rounds of the hierarchical path: one allreduce across hosts
    per shared-memory chunk (TF_RING_SHM_CHUNK_BYTES, 4 MiB by default)."""
    return max(1, math.ceil(nbytes / HIERARCHICAL_CHUNK))


def flat_bytes_between_hosts(nbytes, hosts):
    """Bytes all hosts together send across hosts in one flat ring allreduce
    (ranks host by host: each of the 2(p-1) steps crosses `hosts` links)."""
    p = hosts * RANKS_PER_HOST
    return 2 * (p - 1) * hosts * nbytes / p


def fit_paths(one, two, link):
    """Both models' parameters from the 1-host and 2-host measurements.

    ring: each path is an alpha-beta ring over independent links, as on a
    cluster (t_hier = t_shm + 2(H-1)(a_net + N/(H B_net)), t_flat a ring over
    every rank).
    shared: the simulated hosts share this machine's cores, which run every
    rank and carry every host's packets (veth, bridge, tc, TCP copies), so
    the bytes all hosts send together cost 1/C each; the link's own floor
    (the tc rate) still applies per host. t_hier = t_shm + 2(H-1) a_net
    per chunk + max(2(H-1)/H N / link, 2(H-1) N / C); t_flat likewise with
    the flat ring's bytes between hosts.
    """
    a_shm, b_shm = fit_line(one["shm"])
    inter = [(n, max(t - (a_shm + n / b_shm), 1e-6)) for n, t in two["hierarchical"]]
    a_net, b_net = fit_ring(inter, 2)
    a_flat, b_flat = fit_ring(two["flat"], 2 * RANKS_PER_HOST)
    hosts = 2
    a_chunk, inverse_c = least_squares_2(
        [(2 * (hosts - 1) * chunks(n) / t, 2 * (hosts - 1) * n / t) for n, t in inter])
    p = hosts * RANKS_PER_HOST
    a_step, inverse_cf = least_squares_2(
        [(2 * (p - 1) / t, flat_bytes_between_hosts(n, hosts) / t) for n, t in two["flat"]])
    return {"a_shm": a_shm, "B_shm": b_shm, "a_net": a_net, "B_net": b_net,
            "a_flat": a_flat, "B_flat": b_flat, "link": link,
            "a_chunk": a_chunk, "C_hier": 1.0 / inverse_c,
            "a_flat_step": a_step, "C_flat": 1.0 / inverse_cf}


def predict(fit, model, path, nbytes, hosts):
    shm = fit["a_shm"] + nbytes / fit["B_shm"]
    if model == "ring":
        if path == "hierarchical":
            return shm + ring_allreduce_s(nbytes, hosts, fit["B_net"], fit["a_net"])
        return ring_allreduce_s(nbytes, hosts * RANKS_PER_HOST, fit["B_flat"], fit["a_flat"])
    link_floor = floor_s(nbytes, hosts, fit["link"])
    if path == "hierarchical":
        return (shm + 2 * (hosts - 1) * chunks(nbytes) * fit["a_chunk"]
                + max(link_floor, 2 * (hosts - 1) * nbytes / fit["C_hier"]))
    p = hosts * RANKS_PER_HOST
    return (2 * (p - 1) * fit["a_flat_step"]
            + max(link_floor, flat_bytes_between_hosts(nbytes, hosts) / fit["C_flat"]))


def floor_s(nbytes, hosts, link):
    return 2 * (hosts - 1) / hosts * nbytes / link if hosts > 1 else 0.0


def mb(nbytes):
    return "%g MB" % (nbytes / 2**20) if nbytes >= 2**20 else "%d KB" % (nbytes >> 10)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", default="2gbit", help="tc rate of each host's link")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per job")
    parser.add_argument("--predictions",
                        default=os.path.join(tempfile.gettempdir(), "harness_model_predictions.json"),
                        help="where the 3-host predictions are written before that job runs")
    parser.add_argument("--measure-3-hosts-against", default=None, metavar="PREDICTIONS",
                        help="skip the fit: measure 3 hosts against a saved predictions file")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        work(args)
        return
    link = link_bytes_per_s(args.rate)
    sizes = {"hierarchical": HIER_SIZES, "flat": FLAT_SIZES}
    if args.measure_3_hosts_against:
        # Re-measure 3 hosts against an earlier run's saved measurements.
        with open(args.measure_3_hosts_against) as f:
            saved = json.load(f)
        one, two = saved["measured"]["1"], saved["measured"]["2"]
        print("using the 1- and 2-host measurements saved at %s" % saved["written"])
    else:
        one = run_job(1, args)
        two = run_job(2, args)
    fit = fit_paths(one, two, link)
    predictions = {model: {path: [(n, predict(fit, model, path, n, 3)) for n in sizes[path]]
                           for path in sizes} for model in MODELS}
    if not args.measure_3_hosts_against:
        with open(args.predictions, "w") as f:
            json.dump({"written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "fit": fit,
                       "measured": {"1": one, "2": two}, "predictions_3_hosts": predictions},
                      f, indent=1)
        print("3-host predictions written to %s before measuring them" % args.predictions, flush=True)
    print("shared memory, 1 host x 2: a_shm %.0f us, B_shm %.2f GB/s"
          % (fit["a_shm"] * 1e6, fit["B_shm"] / 1e9))
    print("ring model, 2 hosts: hierarchical a_net %.1f ms, B_net %.0f MB/s; flat a %.1f ms, B %.0f MB/s"
          % (fit["a_net"] * 1e3, fit["B_net"] / 1e6, fit["a_flat"] * 1e3, fit["B_flat"] / 1e6))
    print("shared model, 2 hosts: hierarchical %.1f ms per chunk step, C %.0f MB/s; flat %.1f ms "
          "per step, C %.0f MB/s; link %.0f MB/s per host" % (
              fit["a_chunk"] * 1e3, fit["C_hier"] / 1e6, fit["a_flat_step"] * 1e3,
              fit["C_flat"] / 1e6, link / 1e6))

    three = run_job(3, args)
    print("\n| path | size | 1 host ms | 2 hosts ms | 3 hosts: ring model ms | shared model ms "
          "| measured ms | measured / ring | measured / shared | measured / link floor |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    shm = {n: t for n, t in one["shm"]}
    for path in ("hierarchical", "flat"):
        measured2 = {n: t for n, t in two[path]}
        measured3 = {n: t for n, t in three[path]}
        for n in sizes[path]:
            ring, shared = (dict(predictions[m][path])[n] for m in MODELS)
            m3 = measured3[n]
            print("| %s | %s | %s | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | %.1fx |"
                  % (path, mb(n), "%.2f" % (shm[n] * 1e3) if n in shm else "",
                     measured2[n] * 1e3, ring * 1e3, shared * 1e3, m3 * 1e3, m3 / ring,
                     m3 / shared, m3 / floor_s(n, 3, link)))
    for n, t2 in two["mpi4py_rings"]:
        t3 = dict((k, v) for k, v in three["mpi4py_rings"])[n]
        print("| mpi4py, one ring per local rank (no tf_ring) | %s | | %.1f | %.1f (x%.2f) | | %.1f | "
              "%.2f | | %.1fx |" % (mb(n), t2 * 1e3, t2 * 1e3 * 4 / 3, 4 / 3, t3 * 1e3,
                                   t3 / (t2 * 4 / 3), t3 / floor_s(n * RANKS_PER_HOST, 3, link)))
    if not args.measure_3_hosts_against:
        with open(args.predictions) as f:
            record = json.load(f)
        record["measured"]["3"] = three
        with open(args.predictions, "w") as f:
            json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
