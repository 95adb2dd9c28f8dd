"""Hierarchical collectives on 2 simulated hosts x 2 ranks: runs
multihost/parallel/mpi_hierarchical.py under the launcher with ranks placed
host by host, and its layout-dependent tests again with ranks dealt
round-robin over the hosts (a host's ranks are then not neighbours in rank
order, so allgather must reorder host blocks into rank order)."""
import os
import sys

import pytest

from conftest import REPO, run_under_launcher
from multihost.simulated_hosts import SimulatedHosts, namespaces_available

AVAILABLE, WHY = namespaces_available()
pytestmark = pytest.mark.skipif(not AVAILABLE, reason=WHY)

PARALLEL_FILE = os.path.join(REPO, "tests", "multihost", "parallel", "mpi_hierarchical.py")


def run_file(launcher_args, placement, select=()):
    """`placement` ("by_slot" or "round_robin") is checked by the ranks."""
    command = launcher_args + [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "-o", "python_files=mpi_*.py", "-x", PARALLEL_FILE] + list(select)
    result = run_under_launcher(4, command, timeout=900, env={"TF_RING_TEST_PLACEMENT": placement})
    assert result.returncode == 0, "exit %d\n--- stdout ---\n%s\n--- stderr ---\n%s" % (
        result.returncode, result.stdout[-20000:], result.stderr[-8000:])
    assert result.stdout.count(" passed") >= 4, result.stdout[-4000:]  # every rank ran the tests
    return result


def test_hierarchical_collectives_ranks_placed_host_by_host():
    with SimulatedHosts(2) as hosts:
        run_file(hosts.launcher_args(2), "by_slot")


def test_hierarchical_collectives_ranks_dealt_round_robin():
    with SimulatedHosts(2) as hosts:
        args = hosts.launcher_args(2)
        at = args.index("--mpi-args") + 1
        assert "--map-by ppr:2:node" in args[at]
        args[at] = args[at].replace("--map-by ppr:2:node", "--map-by node")
        run_file(args, "round_robin", ["-k", "layout or allgather or broadcast or bit_for_bit or join"])
