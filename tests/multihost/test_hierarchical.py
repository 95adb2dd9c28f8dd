"""Hierarchical collectives on 2 simulated hosts x 2 ranks: runs
multihost/ranks/mpi_hierarchical.py under the launcher with ranks placed
host by host, and its layout-dependent tests again with ranks dealt
round-robin over the hosts (a host's ranks are then not neighbours in rank
order, so allgather must reorder host blocks into rank order); and
mpi_hierarchical_process_sets.py (process sets choosing their own paths)
both ways."""
import os

import pytest

from conftest import REPO, rank_pytest_command, run_ranks_pytest
from multihost.simulated_hosts import SimulatedHosts, namespaces_available

AVAILABLE, WHY = namespaces_available()
pytestmark = pytest.mark.skipif(not AVAILABLE, reason=WHY)

PARALLEL_FILE = os.path.join(REPO, "tests", "multihost", "ranks", "mpi_hierarchical.py")


def run_file(launcher_args, placement, select=(), parallel_file=PARALLEL_FILE):
    """`placement` ("by_slot" or "round_robin") is checked by the ranks."""
    # Every rank ran the same tests, all passing (a skip on a rank skips this test).
    return run_ranks_pytest(4, launcher_args + rank_pytest_command(parallel_file, *select),
                            timeout=900, env={"TF_RING_TEST_PLACEMENT": placement},
                            what=os.path.basename(parallel_file))


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


SETS_FILE = os.path.join(REPO, "tests", "multihost", "ranks", "mpi_hierarchical_process_sets.py")


def test_process_sets_take_the_hierarchical_path_ranks_placed_host_by_host():
    with SimulatedHosts(2) as hosts:
        run_file(hosts.launcher_args(2), "by_slot", parallel_file=SETS_FILE)


def test_process_sets_take_the_hierarchical_path_ranks_dealt_round_robin():
    with SimulatedHosts(2) as hosts:
        args = hosts.launcher_args(2)
        at = args.index("--mpi-args") + 1
        args[at] = args[at].replace("--map-by ppr:2:node", "--map-by node")
        run_file(args, "round_robin", parallel_file=SETS_FILE)


def test_a_rank_with_other_settings_runs_with_rank_0s(monkeypatch):
    # Across hosts the transport choice is real: a rank that went flat (or
    # off shared memory, or used other chunks) alone would hang the others.
    from parallel.test_agreed_settings import WARNINGS, check_warnings, run_job
    scenarios = ("hierarchical_off", "shm", "chunk", "fusion")
    with SimulatedHosts(2) as hosts:
        args = hosts.launcher_flags(2)
        result = run_job(4, monkeypatch, scenarios, launcher_args=args)
    variables = ("TF_RING_HIERARCHICAL is \"0\"", "TF_RING_SHM is", "TF_RING_SHM_CHUNK_BYTES is",
                 "TF_RING_FUSION_THRESHOLD is \"0\"")
    check_warnings(4, result.stderr, [(who, text) for who, text in WARNINGS
                                      if text.startswith(variables)])
