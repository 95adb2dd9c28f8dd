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
     bytes) and the peak resident memory of the step, against none.

    python benchmarks/compression.py      # as root, under the heavy lock

Data: sklearn.datasets.load_digits (1,797 8x8 images, shipped with
scikit-learn), the last 20% held out; the same shuffled order on every rank,
each rank training on its half of each global batch. Every configuration
starts from the same weights; every rank must end with equal weights.
Goal (issue 50): powersgd >= 3x faster steps than none across the link,
bf16 >= 1.7x, at equal accuracy.
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CHOICES = ["none", "fp16", "bf16", "powersgd"]


def drive(args):
    """Makes the hosts, runs the worker across them, then on one host."""
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from multihost.simulated_hosts import SimulatedHosts, namespaces_available
    ok, why = namespaces_available()
    if not ok:
        sys.exit("compression benchmark: " + why)
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
    worker = [sys.executable, os.path.abspath(__file__), "--worker", "--epochs", str(args.epochs),
              "--target", str(args.target), "--rank", str(args.rank),
              "--warmup-steps", str(args.warmup_steps), "--choices", args.choices]
    with SimulatedHosts(2, rate=args.rate) as hosts:
        cmd = ([sys.executable, "-m", "tf_ring.run"] + hosts.launcher_args(1) + worker
               + ["--link", "2 hosts x 1 rank, link shaped to %s" % args.rate])
        code = subprocess.run(cmd, cwd=REPO, env=env, timeout=args.timeout).returncode
    if code or args.one_host_epochs == 0:
        sys.exit(code)
    # argparse keeps the last --epochs.
    cmd = ([sys.executable, "-m", "tf_ring.run", "-np", "2"] + worker
           + ["--epochs", str(args.one_host_epochs), "--link", "one host x 2 ranks (shared memory)"])
    sys.exit(subprocess.run(cmd, cwd=REPO, env=env, timeout=args.timeout).returncode)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", default="1gbit", help="tc rate of each host's link")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--one-host-epochs", type=int, default=2,
                        help="epochs of the one-host run (0: skip it)")
    parser.add_argument("--target", type=float, default=0.97, help="held-out accuracy to reach")
    parser.add_argument("--rank", type=int, default=4, help="PowerSGD's rank")
    parser.add_argument("--warmup-steps", type=int, default=22,
                        help="PowerSGD's start_powerSGD_iter (22 steps: one epoch)")
    parser.add_argument("--choices", default=",".join(CHOICES),
                        help="comma-separated, from " + ",".join(CHOICES))
    parser.add_argument("--timeout", type=int, default=1200, help="seconds for each job")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--link", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        from compression_worker import work
        work(args)
    else:
        drive(args)


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    main()
