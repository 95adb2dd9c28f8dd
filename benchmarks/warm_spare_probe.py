"""How much of an elastic restart could warm spares save? A restarted world
(--recovery restart, or growth) spends most of its seconds in new
processes importing TensorFlow (docs/elastic.md). A spare imports it
before it is needed and waits on a Unix socket; the process mpirun starts
(the stand-in) hands it the rank's environment (Open MPI's PMIx
identity) and its stdin, stdout and stderr (SCM_RIGHTS), and relays its
exit code. The spare then calls MPI_Init as that rank.

Prints, for 2 and 3 ranks on this machine, seconds from mpirun's start to
every rank's first allreduce done: cold (each rank imports TensorFlow,
then MPI_Init) and warm (spares ready beforehand), with the spares' memory.

    python benchmarks/warm_spare_probe.py [--repeats 3]
"""
import argparse
import array
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)
# As tfringrun starts ranks (its child_environment): root allowed, and no
# libfabric BTL, which would add 1 s to every MPI_Init.
RANK_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            "TF_CPP_MIN_LOG_LEVEL": "3", "OMPI_MCA_btl": "^ofi"}


def first_allreduce():
    """What each rank runs once MPI may start: prints when its first allreduce is done."""
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    values = np.full(1000, comm.rank + 1.0)
    comm.Allreduce(MPI.IN_PLACE, values)
    right = values[0] == comm.size * (comm.size + 1) / 2
    print("DONE rank=%d at=%.3f right=%d" % (comm.rank, time.time(), right), flush=True)


def spare(path):
    """Imports TensorFlow, then becomes whichever rank connects to `path`."""
    import tensorflow  # noqa: F401  (the slow part, done ahead)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    open(path + ".ready", "w").close()
    conn, _ = server.accept()
    fds = array.array("i")
    message, ancillary, _, _ = conn.recvmsg(1 << 20, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
    os.environ.clear()
    os.environ.update(json.loads(message.decode()))  # the rank's identity, before MPI_Init
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    first_allreduce()
    from mpi4py import MPI
    MPI.Finalize()  # before the stand-in exits: PRRTE wants its rank finalized by then
    conn.sendall(b"0")


def stand_in(directory):
    """What mpirun starts in the warm case: hands this rank to a spare."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(os.path.join(directory, "spare-%s" % os.environ["OMPI_COMM_WORLD_RANK"]))
    conn.sendmsg([json.dumps(dict(os.environ)).encode()],
                 [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]).tobytes())])
    sys.exit(int(conn.recv(16) or b"1"))


def cold():
    import tensorflow  # noqa: F401
    first_allreduce()


def world(np_, rank_command):
    """Seconds from mpirun's start to the last rank's first allreduce, and whether all were right."""
    env = dict(os.environ, **RANK_ENV)
    began = time.time()
    done = subprocess.run(["mpirun", "--oversubscribe", "-np", str(np_)] + rank_command,
                          env=env, capture_output=True, text=True, timeout=120)
    stamps = re.findall(r"DONE rank=\d+ at=([0-9.]+) right=(\d)", done.stdout)
    if done.returncode != 0 or len(stamps) != np_:
        return None, False, done.stdout + done.stderr
    return max(float(t) for t, _ in stamps) - began, all(r == "1" for _, r in stamps), ""


def warm_world(np_):
    with tempfile.TemporaryDirectory() as directory:
        env = dict(os.environ, **RANK_ENV)
        spares = [subprocess.Popen([sys.executable, HERE, "--spare",
                                    os.path.join(directory, "spare-%d" % r)], env=env)
                  for r in range(np_)]
        while not all(os.path.exists(os.path.join(directory, "spare-%d.ready" % r))
                      for r in range(np_)):
            time.sleep(0.05)
        resident = sum(_resident_mb(p.pid) for p in spares) / np_
        seconds, right, said = world(np_, [sys.executable, HERE, "--stand-in", directory])
        for p in spares:
            p.wait(timeout=30)
    return seconds, right, said, resident


def _resident_mb(pid):
    with open("/proc/%d/status" % pid) as status:
        return int(re.search(r"VmRSS:\s+(\d+)", status.read()).group(1)) / 1024.0


def main():
    if "--spare" in sys.argv:
        return spare(sys.argv[sys.argv.index("--spare") + 1])
    if "--stand-in" in sys.argv:
        return stand_in(sys.argv[sys.argv.index("--stand-in") + 1])
    if "--cold" in sys.argv:
        return cold()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    repeats = parser.parse_args().repeats
    print("| ranks | run | cold: mpirun to first allreduce s | warm | warm / cold | "
          "a spare's memory MB | all right |")
    print("|---|---|---|---|---|---|---|")
    for np_ in (2, 3):
        for run in range(repeats):
            t_cold, right_cold, said = world(np_, [sys.executable, HERE, "--cold"])
            t_warm, right_warm, said_warm, resident = warm_world(np_)
            if t_cold is None or t_warm is None:
                print((said + said_warm)[-3000:], file=sys.stderr)
                sys.exit("warm_spare_probe: a world failed")
            print("| %d | %d | %.2f | %.2f | %.2f | %.0f | %s |" % (
                np_, run + 1, t_cold, t_warm, t_warm / t_cold, resident,
                "yes" if right_cold and right_warm else "NO"), flush=True)
    print("(one machine, %d cores; load average at the end: %.1f %.1f %.1f)"
          % ((os.cpu_count(),) + os.getloadavg()))


if __name__ == "__main__":
    main()
