"""Multi-host: 2 simulated hosts x 2 ranks, each host's link shaped to 2 Gbit/s
each way (tests/multihost/simulated_hosts.py). A 64 MB float32 allreduce and
benchmark (b)'s 160-gradient step, run by tf_ring hierarchical, tf_ring flat
(TF_RING_HIERARCHICAL=0, the engine restarted in the same job) and raw mpi4py
on the same buffers, in one run.

    python benchmarks/multihost.py          # as root: makes the hosts, runs, removes them

Targets (issue 13): 64 MB at least 1.5x faster than one mpi4py Allreduce;
the 160-gradient step no slower than 160 mpi4py Allreduce calls.
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def drive(args):
    """Makes the hosts and runs this script's worker on them."""
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from multihost.simulated_hosts import SimulatedHosts, namespaces_available
    ok, why = namespaces_available()
    if not ok:
        sys.exit("multihost benchmark: " + why)
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_RING_HIERARCHICAL", None)  # the worker sets it per phase
    with SimulatedHosts(args.hosts, rate=args.rate) as hosts:
        cmd = ([sys.executable, "-m", "tf_ring.run"] + hosts.launcher_args(args.ranks_per_host)
               + [sys.executable, os.path.abspath(__file__), "--worker",
                  "--repeats", str(args.repeats), "--link", args.rate or "unshaped"])
        sys.exit(subprocess.run(cmd, cwd=REPO, env=env, timeout=args.timeout).returncode)


def work(args):
    import numpy as np
    import tensorflow as tf
    from mpi4py import MPI

    import tf_ring as hvd
    from bench_util import ms, print_table, timed
    from gradient_step import gradient_sizes

    comm = MPI.COMM_WORLD
    rng = np.random.default_rng(comm.Get_rank())
    big = rng.random(16 * 2**20, dtype=np.float32)  # 64 MB
    big_out = np.empty_like(big)
    grads = [rng.random(n, dtype=np.float32) for n in gradient_sizes()]
    grads_out = [np.empty_like(g) for g in grads]
    big_tensor = tf.constant(big)
    grad_tensors = [tf.constant(g) for g in grads]

    def measure_tf_ring():
        @tf.function
        def step(ts):
            return [hvd.allreduce(t, op=hvd.Sum) for t in ts]

        def run_big():
            hvd.allreduce(big_tensor, op=hvd.Sum, name="big").numpy()

        def run_step():
            step(grad_tensors)[-1].numpy()

        before = hvd.stats()["hierarchical_batches"]
        t_big, _ = timed(run_big, args.repeats, warmup=1)
        t_step, _ = timed(run_step, args.repeats, warmup=2)
        crossed = hvd.stats()["hierarchical_batches"] - before
        results = [hvd.allreduce(big_tensor, op=hvd.Sum, name="big").numpy()] + \
                  [r.numpy() for r in step(grad_tensors)]
        return t_big, t_step, crossed, results

    hvd.init()
    layout = "%d hosts x %d ranks" % (hvd.cross_size(), hvd.local_size())
    t_big_h, t_step_h, crossed_h, results_h = measure_tf_ring()
    hvd.shutdown()
    os.environ["TF_RING_HIERARCHICAL"] = "0"
    hvd.init()
    t_big_f, t_step_f, crossed_f, results_f = measure_tf_ring()

    def run_big_mpi():
        comm.Allreduce(big, big_out, op=MPI.SUM)

    def run_step_mpi():
        for g, o in zip(grads, grads_out):
            comm.Allreduce(g, o, op=MPI.SUM)

    t_big_m, _ = timed(run_big_mpi, args.repeats, warmup=1)
    t_step_m, _ = timed(run_step_mpi, args.repeats, warmup=1)

    # The figures count only if the answers are right and the paths were the ones named.
    assert crossed_h > 0 and crossed_f == 0, (crossed_h, crossed_f)
    for h, f, m in zip(results_h, results_f, [big_out] + grads_out):
        np.testing.assert_allclose(h, m, rtol=1e-5)
        np.testing.assert_allclose(f, m, rtol=1e-5)

    def ratio(t, base):
        return "%.2fx" % (base / t)

    rows = [
        ["64 MB allreduce", "tf_ring hierarchical", ms(t_big_h), ratio(t_big_h, t_big_m)],
        ["64 MB allreduce", "tf_ring flat", ms(t_big_f), ratio(t_big_f, t_big_m)],
        ["64 MB allreduce", "mpi4py Allreduce", ms(t_big_m), "1.00x"],
        ["160-gradient step", "tf_ring hierarchical", ms(t_step_h), ratio(t_step_h, t_step_m)],
        ["160-gradient step", "tf_ring flat", ms(t_step_f), ratio(t_step_f, t_step_m)],
        ["160-gradient step", "mpi4py, 160 Allreduce calls", ms(t_step_m), "1.00x"],
    ]
    print_table("%s, link %s, median of %d (speedup = mpi4py time / this time)"
                % (layout, args.link, args.repeats), ["work", "method", "ms", "speedup"], rows)
    # Random float sums: hierarchical adds within hosts first, flat MPI in its own order.
    differ = sum(int(np.count_nonzero(h != f)) for h, f in zip(results_h, results_f))
    total = sum(h.size for h in results_h)
    worst = max(float(np.max(np.abs(h - f) / np.maximum(np.abs(f), 1e-30))) for h, f in
                zip(results_h, results_f))
    if hvd.rank() == 0:
        print("hierarchical vs flat: %d of %d float32 sums differ (largest relative difference %.1e)"
              % (differ, total, worst))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--ranks-per-host", type=int, default=2)
    parser.add_argument("--rate", default="2gbit", help="tc rate of each link, e.g. 2gbit")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=int, default=1800, help="seconds for the whole job")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--link", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        work(args)
    else:
        drive(args)


if __name__ == "__main__":
    main()
