"""Can an MPI world grow in-process with the pip Open MPI? Two ranks on two
simulated hosts call MPI_Comm_spawn for one process on a third host,
merge the intercommunicator, check 20 allreduces over the 3 ranks; then
the new process exits and the two survivors must see it fail, revoke and
shrink (ULFM) and reduce again. Two cases, each run --repeats times:

- "in the allocation": the third host was in mpirun's --host list from the
  start (with no rank placed there), so its Open MPI daemon already runs;
- "added": the third host is new to mpirun, named through the
  PMIX_ADD_HOST info key, as elastic growth onto a discovered host needs.

Prints a table: whether each step worked and how long it took. This is the
measurement behind docs/elastic.md's choice of a coordinated restart for
growth; it uses mpi4py only (no TensorFlow).

    python benchmarks/elastic_spawn_probe.py [--repeats 3]   # as root
"""
import argparse
import os
import re
import subprocess
import sys
import time

HERE = os.path.abspath(__file__)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests"))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

from tf_ring.elastic_driver.flags import IN_PROCESS_MPI_ARGS  # noqa: E402  (no TensorFlow)

CASES = ("in the allocation", "added")


def parent(new_host, case):
    """Runs in each of the 2 original ranks."""
    import numpy as np
    from mpi4py import MPI
    info = MPI.Info.Create()
    info.Set("host", new_host + ":1")
    if case == "added":
        info.Set("PMIX_ADD_HOST", new_host + ":1")
    began = time.time()
    inter = MPI.COMM_WORLD.Spawn(sys.executable, args=[HERE, "--child"], maxprocs=1, info=info)
    spawned = time.time()
    merged = inter.Merge(high=False)
    merged.Set_errhandler(MPI.ERRORS_RETURN)
    merged_at = time.time()
    right = _reduce_and_check(merged, np)
    print("PARENT rank=%d spawn=%.3f merge=%.3f size=%d right=%d"
          % (merged.rank, spawned - began, merged_at - spawned, merged.size, right), flush=True)
    values = np.ones(1000)
    try:
        while True:  # until the child's exit shows
            merged.Allreduce(MPI.IN_PLACE, values)
            time.sleep(0.005)
    except MPI.Exception:
        failed_at = time.time()
    merged.Revoke()
    shrunk = merged.Shrink()
    right = _reduce_and_check(shrunk, np)
    print("PARENT rank=%d shrink=%.3f size=%d right=%d"
          % (merged.rank, time.time() - failed_at, shrunk.size, right), flush=True)


def child():
    """The spawned process: joins, reduces, then exits as a lost rank would."""
    import numpy as np
    from mpi4py import MPI
    merged = MPI.Comm.Get_parent().Merge(high=True)
    merged.Set_errhandler(MPI.ERRORS_RETURN)
    _reduce_and_check(merged, np)
    time.sleep(0.5)
    os._exit(9)


def _reduce_and_check(comm, np):
    from mpi4py import MPI
    values = np.zeros(1000)
    for _ in range(20):
        values[:] = comm.rank + 1.0
        comm.Allreduce(MPI.IN_PLACE, values)
    return int(values[0] == comm.size * (comm.size + 1) / 2)


def run_case(case):
    """One mpirun: {"spawn": s, "merge": s, "shrink": s, ...} of the slower rank, and what it said."""
    from multihost.simulated_hosts import SimulatedHosts
    with SimulatedHosts(3) as hosts:
        args = hosts.mpi_args(1)
        started = hosts.hostnames if case == CASES[0] else hosts.hostnames[:2]
        args[args.index("--host") + 1] = ",".join(h + ":1" for h in started)
        args[args.index("-np") + 1] = "2"
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        # --leave-session-attached: the remote daemons' own errors reach us.
        command = (["mpirun", "--leave-session-attached"] + list(IN_PROCESS_MPI_ARGS) + args
                   + [sys.executable, HERE, "--parent", hosts.hostnames[2], case])
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
            said = done.stdout + done.stderr
        except subprocess.TimeoutExpired as e:
            said = "timed out after 60 s\n" + (e.stdout or b"").decode() + (e.stderr or b"").decode()
    found = {}
    for line in re.findall(r"PARENT rank=\d .*", said):
        for key, value in re.findall(r"(spawn|merge|shrink)=([0-9.]+)", line):
            found[key] = max(found.get(key, 0.0), float(value))
    found["joined right"] = len(re.findall(r"merge=\S+ size=3 right=1", said)) == 2
    found["shrunk right"] = len(re.findall(r"shrink=\S+ size=2 right=1", said)) == 2
    return found, said


FAILURE_SIGNS = (  # (what the table says, a pattern of mpirun's output)
    ("a daemon's PMIx connect failed", r"PMIX ERROR: \S+ in file \S+pmix_server_dyn\.c"),
    ("a daemon segfaulted", r"Segmentation fault"),
    ("mpirun lost a daemon", r"lost communication with a remote daemon"),
    ("timed out", r"timed out after"),
)


def why_it_failed(said):
    signs = [label for label, pattern in FAILURE_SIGNS if re.search(pattern, said)]
    if signs:
        return ", ".join(signs)
    return said.strip().splitlines()[-1] if said.strip() else "no output"


def main():
    if "--child" in sys.argv:
        return child()
    if "--parent" in sys.argv:
        at = sys.argv.index("--parent")
        return parent(sys.argv[at + 1], sys.argv[at + 2])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    repeats = parser.parse_args().repeats
    from multihost.simulated_hosts import namespaces_available
    ok, why = namespaces_available()
    if not ok:
        sys.exit("elastic_spawn_probe: " + why)
    print("| third host | run | spawn s | merge s | 3 ranks reduce right | revoke + shrink "
          "s | 2 survivors reduce right | if not, what mpirun said |")
    print("|---|---|---|---|---|---|---|---|")
    for case in CASES:
        for run in range(repeats):
            found, said = run_case(case)
            cells = ["%.2f" % found[k] if k in found else "-" for k in ("spawn", "merge")]
            cells.insert(2, "yes" if found["joined right"] else "NO")
            cells += ["%.3f" % found["shrink"] if "shrink" in found else "-",
                      "yes" if found["shrunk right"] else "NO"]
            failed = not (found["joined right"] and found["shrunk right"])
            print("| %s | %d | %s | %s |" % (case, run + 1, " | ".join(cells),
                                             why_it_failed(said) if failed else ""), flush=True)
    print("(mpirun %s, as tfringrun --recovery in-process runs it; 1 rank per simulated host; "
          "load average at the end: %.1f %.1f %.1f)"
          % ((" ".join(IN_PROCESS_MPI_ARGS),) + os.getloadavg()))


if __name__ == "__main__":
    main()
