"""Elastic host discovery: parsing the script's output, its failures, and
the blacklist's cooldown (a fake clock, so no sleeping)."""
import pytest

from tf_ring.elastic_driver.discovery import Blacklist, DiscoveryError, parse_hosts, run_discovery


def test_parse_hosts_and_slots_in_printed_order():
    text = "# pool\nnodeB:4\n\nnodeA\n  nodeC:2  # spare\n"
    assert parse_hosts(text) == [("nodeB", 4), ("nodeA", 1), ("nodeC", 2)]
    assert parse_hosts("nodeA\nnodeB:3\n", default_slots=2) == [("nodeA", 2), ("nodeB", 3)]
    assert parse_hosts("") == []


@pytest.mark.parametrize("line", ["nodeA:", "nodeA:x", "nodeA:-1", ":3", "node A:2", "nodeA:0"])
def test_bad_line_names_the_line(line):
    with pytest.raises(DiscoveryError) as e:
        parse_hosts("ok:1\n" + line + "\n")
    assert "line 2" in str(e.value)


def test_duplicate_host_is_an_error():
    with pytest.raises(DiscoveryError, match="twice"):
        parse_hosts("a:1\nb\na:2\n")


def test_script_runs_and_failures_are_clear(tmp_path):
    good = tmp_path / "good.sh"
    good.write_text("#!/bin/sh\necho localhost:3\n")
    good.chmod(0o755)
    assert run_discovery(str(good)) == [("localhost", 3)]
    bad = tmp_path / "bad.sh"
    bad.write_text("#!/bin/sh\necho inventory down >&2\nexit 3\n")
    bad.chmod(0o755)
    with pytest.raises(DiscoveryError) as e:
        run_discovery(str(bad))
    assert "exited 3" in str(e.value) and "inventory down" in str(e.value)
    with pytest.raises(DiscoveryError, match="did not finish"):
        run_discovery("sleep 5", timeout=0.2)


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_blacklist_without_range_is_permanent():
    clock = FakeClock()
    bl = Blacklist(clock=clock)
    bl.add("a")
    clock.now += 1e9
    assert bl.usable([("a", 2), ("b", 1)]) == [("b", 1)]


def test_blacklist_cooldown_expires_and_doubles_on_repeat():
    clock = FakeClock()
    bl = Blacklist((10, 20), clock=clock, rand=lambda low, high: 15.0)
    bl.add("a")
    assert bl.blocked("a") and not bl.blocked("b")
    clock.now += 14.9
    assert bl.blocked("a")
    clock.now += 0.2
    assert not bl.blocked("a") and bl.usable([("a", 1)]) == [("a", 1)]
    bl.add("a")  # second failure: 30 s
    clock.now += 29.9
    assert bl.blocked("a")
    clock.now += 0.2
    assert not bl.blocked("a")


def test_blacklist_bad_range():
    with pytest.raises(ValueError, match="MIN <= MAX"):
        Blacklist((5, 1))


# --- the driver's plan for the next world ----------------------------------------

from tf_ring.elastic_driver.elastic_plan import BelowMinimum, added_slots, plan_world  # noqa: E402
from tf_ring.plumbing.host_names import hosts_argument  # noqa: E402


def test_plan_caps_at_max_np_and_puts_survivors_first():
    bl = Blacklist()
    chosen, np = plan_world([("new", 2), ("old", 2)], bl, min_np=2, max_np=3, survivors=["old"])
    assert np == 3 and chosen == [("old", 2), ("new", 1)]
    assert hosts_argument(chosen) == "old:2,new:1"
    chosen, np = plan_world([("a", 1), ("b", 4)], bl, min_np=1, max_np=None)
    assert np == 5 and chosen == [("a", 1), ("b", 4)]


def test_plan_drops_blacklisted_and_names_the_minimum():
    bl = Blacklist()
    bl.add("b")
    assert plan_world([("a", 2), ("b", 2)], bl, 2, 4) == ([("a", 2)], 2)
    with pytest.raises(BelowMinimum) as e:
        plan_world([("a", 2), ("b", 2)], bl, 3, 4)
    assert "at least 3" in str(e.value) and "2 usable slots" in str(e.value)


def test_added_slots_sees_new_hosts_and_slots_but_not_blacklisted():
    bl = Blacklist()
    bl.add("bad")
    assert not added_slots([("a", 2)], [("a", 2)], bl)
    assert added_slots([("a", 2)], [("a", 3)], bl)
    assert added_slots([("a", 2)], [("a", 2), ("b", 1)], bl)
    assert not added_slots([("a", 2)], [("a", 2), ("bad", 4)], bl)


# --- what one world's end means ------------------------------------------------

from tf_ring.elastic_driver.elastic_plan import judge_world  # noqa: E402
from tf_ring.plumbing.env_names import EXIT_HOSTS_UPDATED  # noqa: E402

HOSTS = {0: "a", 1: "a", 2: "b"}


def judge(rc, ends, silent=(), named=(), mpi_errors=()):
    """ends: [(rank, kind, code)] in the order the wrappers reported them."""
    ended = {r: (kind, code) for r, kind, code in ends}
    return judge_world(rc, ended, [r for r, _, _ in ends], list(silent), list(named), HOSTS.get,
                       list(mpi_errors))


def test_a_rank_killed_first_is_a_lost_host_even_when_survivors_then_fail():
    assert judge(1, [(2, "exit", 137), (0, "exit", 1), (1, "exit", 1)]) == (1, {"b"})
    assert judge(0, [(0, "stopped", 143), (1, "stopped", 143)], silent=[2]) == (0, {"b"})


def test_an_ordinary_error_first_is_no_host_loss_whatever_the_teardown_did_to_the_rest():
    # Seen in CI: rank 1 raised, mpirun's teardown silenced rank 0's wrapper.
    assert judge(1, [(1, "exit", 1)], silent=[0, 2]) == (1, set())
    assert judge(1, [(1, "exit", 1), (0, "exit", 137), (2, "exit", 137)]) == (1, set())
    # ...unless mpirun itself said it lost a host.
    assert judge(1, [(1, "exit", 1)], silent=[2], named=["b"]) == (1, {"b"})


def test_ranks_asking_for_a_relaunch_are_not_a_loss():
    assert judge(0, [(0, "exit", EXIT_HOSTS_UPDATED)], silent=[1, 2]) == (EXIT_HOSTS_UPDATED, set())
    assert judge(1, [(0, "exit", EXIT_HOSTS_UPDATED), (2, "exit", 137)]) == (1, {"b"})


def test_a_peers_mpi_error_abort_after_a_rank_left_for_a_relaunch_is_still_a_relaunch():
    # Seen in CI: rank 0 exited 75 at the commit, rank 1's MPI saw its socket
    # close and aborted (code 14) before reaching its own exit 75.
    assert judge(14, [(0, "exit", EXIT_HOSTS_UPDATED), (1, "exit", 14)],
                 mpi_errors=[1]) == (EXIT_HOSTS_UPDATED, set())
    # An abort that is no MPI error is still a rank's own failure.
    assert judge(1, [(0, "exit", EXIT_HOSTS_UPDATED), (1, "exit", 1)]) == (1, set())
    # The reports' order is not the events' order: the abort's report came
    # first on hosts with their own /dev/shm (2026-11-28), rank 0's exit 75
    # second. A rank leaving for a relaunch explains the abort either way.
    assert judge(14, [(1, "exit", 14), (0, "exit", EXIT_HOSTS_UPDATED)],
                 mpi_errors=[1]) == (EXIT_HOSTS_UPDATED, set())
    # An MPI error abort with nobody leaving for a relaunch: a failure.
    assert judge(14, [(1, "exit", 14), (0, "stopped", 143)], mpi_errors=[1]) == (14, set())


def test_a_survivors_mpi_error_abort_reported_first_does_not_hide_the_killed_rank():
    # Seen on the simulated hosts: rank 2 was killed, rank 1's MPI saw the
    # socket close and aborted (code 14), and its report came first.
    assert judge(137, [(1, "exit", 14), (2, "exit", 137)], mpi_errors=[1]) == (137, {"b"})
    assert judge(1, [(0, "exit", 14)], silent=[2], mpi_errors=[0]) == (1, {"b"})
    # Open MPI named rank 1 only; rank 0 aborted with the same MPI error code.
    assert judge(14, [(0, "exit", 14), (1, "exit", 14), (2, "exit", 137)],
                 mpi_errors=[1]) == (14, {"b"})
    # A reported kill: the silent rank 0 was cut off by the teardown, its host stays.
    assert judge(14, [(2, "exit", 137), (1, "exit", 14)], silent=[0], mpi_errors=[1]) == (14, {"b"})
    # With no rank killed or silent an MPI error is an ordinary failure...
    assert judge(14, [(1, "exit", 14), (0, "stopped", 143)], mpi_errors=[1]) == (14, set())
    # ...and a Python error first still means no restart.
    assert judge(1, [(1, "exit", 1), (0, "exit", 14), (2, "exit", 137)], mpi_errors=[0]) == (1, set())
