"""How late the launcher's heartbeats arrive while the job's links are
saturated: 2 simulated hosts x 2 ranks, each link shaped to 2 Gbit/s
(tests/multihost/simulated_hosts.py), --detection-timeout 60 so nothing is
declared lost. One job idles, one runs 64 MB mpi4py allreduces back to back
(the link's load alone), one the same through tf_ring (TensorFlow on all 4
ranks as well, the 2 cores busy). tfringrun prints the longest silence of any
running rank on each path: the status lines through Open MPI's daemons, and
the signed UDP datagrams sent from beside each rank (tf_ring/run/beats.py).

    python benchmarks/heartbeats_under_load.py      # as root: makes the hosts, runs, removes them
"""
import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

IDLE = "import time; from mpi4py import MPI; MPI.COMM_WORLD.Barrier(); time.sleep({seconds})"
LOADED = ("import time; from mpi4py import MPI; import numpy as np; c = MPI.COMM_WORLD; "
          "x = np.ones(16 << 20, np.float32); y = np.empty_like(x); end = time.time() + {seconds}; "
          "n = 0\nwhile c.allreduce(time.time() < end, op=MPI.LAND):\n"
          "    c.Allreduce(x, y); n += 1\n"
          "if c.rank == 0: print('allreduces of 64 MB: %d' % n, flush=True)")
TF_RING = ("import time; import numpy as np; import tensorflow as tf; import tf_ring as hvd; "
           "from mpi4py import MPI; hvd.init(); x = tf.constant(np.ones(16 << 20, np.float32)); "
           "end = time.time() + {seconds}; n = 0\n"
           "while MPI.COMM_WORLD.allreduce(time.time() < end, op=MPI.LAND):\n"
           "    hvd.allreduce(x, op=hvd.Sum, name='big').numpy(); n += 1\n"
           "if hvd.rank() == 0: print('tf_ring allreduces of 64 MB: %d' % n, flush=True)")
SUMMARY = re.compile(r"longest silence of a running rank ([\d.]+) s on mpirun's output, "
                     r"([\d.]+) s over UDP")


def run_job(hosts, code, timeout):
    env = dict(os.environ, PYTHONPATH=REPO)
    cmd = ([sys.executable, "-m", "tf_ring.run"] + hosts.launcher_args(2)
           + ["--detection-timeout", "60", sys.executable, "-c", code])
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    found = SUMMARY.search(done.stderr)
    if done.returncode != 0 or not found:
        sys.exit("job failed (%d):\n%s" % (done.returncode, done.stderr[-3000:]))
    return float(found.group(1)), float(found.group(2)), done.stdout.strip()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=60, help="of the loaded job")
    parser.add_argument("--rate", default="2gbit")
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from multihost.simulated_hosts import SimulatedHosts, namespaces_available
    ok, why = namespaces_available()
    if not ok:
        sys.exit("heartbeat benchmark: " + why)
    rows = []
    with SimulatedHosts(2, rate=args.rate) as hosts:
        for label, code in (("idle", IDLE), ("mpi4py 64 MB allreduces", LOADED),
                            ("tf_ring 64 MB allreduces", TF_RING)):
            output_gap, udp_gap, said = run_job(hosts, code.format(seconds=args.seconds),
                                                timeout=args.seconds * 4 + 120)
            rows.append((label, output_gap, udp_gap, said))
    output_every = 60 / 3.5
    print("\n2 simulated hosts x 2 ranks, links %s, %d s per job; beats every %.1f s on mpirun's "
          "output, every 0.5 s over UDP; late = longest silence - interval" % (
              args.rate, args.seconds, output_every))
    print("%-30s | %20s | %16s | %17s | %13s" % ("job", "output: silence (s)", "output: late (s)",
                                                  "UDP: silence (s)", "UDP: late (s)"))
    for label, output_gap, udp_gap, said in rows:
        print("%-30s | %20.1f | %16.1f | %17.1f | %13.1f   %s" % (
            label, output_gap, max(0.0, output_gap - output_every), udp_gap,
            max(0.0, udp_gap - 0.5), said))

if __name__ == "__main__":
    main()
