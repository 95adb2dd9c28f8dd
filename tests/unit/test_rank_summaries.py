"""The launching tests' judgement of their ranks (tests/rank_summaries.py)
and the whole suite's check of its skips (tests/allowed_skips.py, the hooks
in tests/conftest.py): a skip on a rank is never a pass, and a skip nobody
listed fails a whole run."""
import os
import subprocess
import sys

import pytest

import allowed_skips
import rank_summaries as rs
from conftest import REPO

CASES = os.path.join(REPO, "tests", "unit", "rank_summary_cases.py")


def summary(rank, passed=3, failed=0, skipped=0, error=0, skips=()):
    counts = dict.fromkeys(rs.COUNTS, 0)
    counts.update(passed=passed, failed=failed, skipped=skipped, error=error)
    return {"rank": rank, "counts": counts, "skips": [list(s) for s in skips]}


def output_of(*summaries, noise="\x1b[32m3 passed\x1b[0m in 1.00s\n"):
    """A job's merged output: pytest's own lines (coloured, as mpirun's
    terminal makes them) around each rank's summary line."""
    return "".join(noise + "\n" + rs.summary_line(s) + "\n" for s in summaries)


def test_a_summary_line_reads_back_as_written_through_colours():
    written = [summary(1, skipped=1, skips=[("f.py::t", "no GPU")]), summary(0)]
    assert rs.read_summaries(output_of(*written)) == written


def test_every_rank_passing_the_same_tests_passes():
    verdict = rs.judge(rs.read_summaries(output_of(summary(0), summary(1), summary(2))), 3)
    assert (verdict.kind, verdict.message) == ("pass", "3 passed on each of 3 ranks")


def test_a_skip_on_every_rank_skips_with_the_ranks_reasons():
    skip = ("mpi_x.py::test_shm", "the shared-memory allreduce needs every rank on one host")
    verdict = rs.judge([summary(r, passed=2, skipped=1, skips=[skip]) for r in range(2)], 2)
    assert verdict.kind == "skip"
    assert "1 test(s) skipped" in verdict.message and "2 passed, 1 skipped on each" in verdict.message
    assert "mpi_x.py::test_shm on rank(s) 0,1: the shared-memory allreduce" in verdict.message


def test_a_skip_on_one_rank_where_the_others_passed_fails_as_a_disagreement():
    # What counting " passed" lines let through: every rank printed "passed".
    ranks = [summary(0, passed=3), summary(1, passed=2, skipped=1, skips=[("t.py::a", "why")])]
    verdict = rs.judge(ranks, 2)
    assert verdict.kind == "fail"
    assert "rank 0: 3 passed; rank 1: 2 passed, 1 skipped" in verdict.message


@pytest.mark.parametrize("bad", [dict(failed=1), dict(error=1), dict(passed=0, error=1)])
def test_a_failure_or_error_on_any_rank_fails(bad):
    verdict = rs.judge([summary(0), summary(1, **bad)], 2)
    assert verdict.kind == "fail" and "failed or errored" in verdict.message
    assert "rank 1:" in verdict.message and "rank 0:" not in verdict.message


def test_mismatched_counts_fail_naming_each_rank():
    verdict = rs.judge([summary(0, passed=10), summary(1, passed=9), summary(2, passed=10)], 3)
    assert verdict.kind == "fail"
    assert "rank 0: 10 passed; rank 1: 9 passed; rank 2: 10 passed" in verdict.message


@pytest.mark.parametrize("ranks", [[0], [0, 0], [0, 2], [1, 2]])
def test_a_missing_or_doubled_rank_fails(ranks):
    # One rank's line printed twice must not pass for two ranks' lines.
    verdict = rs.judge([summary(r) for r in ranks], 2)
    assert verdict.kind == "fail" and "from each of ranks 0..1" in verdict.message


def test_nothing_run_fails():
    assert rs.judge([summary(0, passed=0), summary(1, passed=0)], 2).kind == "fail"


def test_a_damaged_summary_line_is_refused():
    whole = rs.summary_line(summary(0))
    with pytest.raises(ValueError, match="damaged"):
        rs.read_summaries("x\n" + whole[:len(whole) // 2] + "\n")


def test_check_ranks_skips_or_fails_the_launching_test():
    skipped = output_of(*[summary(r, passed=1, skipped=1, skips=[("a.py::b", "no host")])
                          for r in range(2)])
    with pytest.raises(pytest.skip.Exception, match="a.py::b on rank\\(s\\) 0,1: no host"):
        rs.check_ranks(skipped, 2)
    with pytest.raises(pytest.fail.Exception, match="from each of ranks 0..2"):
        rs.check_ranks(output_of(summary(0), summary(1)), 3)
    assert rs.check_ranks(output_of(summary(0), summary(1)), 2).kind == "pass"


def test_only_the_listed_skips_are_allowed():
    gpu = ("tests/gpu/test_gpu.py::test_collectives_on_gpu[2]",
           "no GPU test possible: PyTorch is not installed (the GPU tests hold CUDA tensors in PyTorch)")
    jax = ("tests/builds/test_engine_only.py::test_xla_handlers_inside_a_jax_jit_program_on_host_arrays[3]",
           "JAX is not installed here: the handlers run through jax.ffi where it is")
    hosts = ("tests/multihost/test_hierarchical.py::test_hierarchical_collectives_ranks_placed_host_by_host",
             "simulated hosts need root")
    other_reason = ("tests/gpu/test_xla_gpu.py::test_collectives_inside_a_compiled_gpu_step[2]",
                    "tf_ring is not a CUDA build with the XLA lowering (cpu)")
    assert allowed_skips.unexpected([gpu, jax, hosts, other_reason]) == [hosts, other_reason]


def run_cases(*args, **env):
    full = dict(os.environ, **env)
    for name in (rs.SUMMARY_VAR, "CI", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        if name not in env:
            full.pop(name, None)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-o", "addopts="] + list(args) + [CASES], cwd=REPO, env=full, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)


def test_a_rank_prints_its_summary_with_its_skips():
    done = run_cases(**{rs.SUMMARY_VAR: "1", "OMPI_COMM_WORLD_RANK": "1",
                        "TF_RING_TEST_CASE_SKIP": "no such device"})
    assert done.returncode == 0, done.stdout
    (got,) = rs.read_summaries(done.stdout)
    assert got["rank"] == 1
    assert got["counts"] == dict(dict.fromkeys(rs.COUNTS, 0), passed=1, skipped=1)
    assert got["skips"] == [["tests/unit/rank_summary_cases.py::test_skips_when_told",
                             "no such device"]]


# The suite runs on pytest-xdist workers: the controller must see their skips.
@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["plain", "xdist"])
def test_under_ci_an_unlisted_skip_fails_the_run_naming_it(workers):
    done = run_cases(*workers, CI="true", TF_RING_TEST_CASE_SKIP="namespaces cannot be made here")
    assert done.returncode == 1, done.stdout
    assert "unexpected skips: this run fails" in done.stdout
    assert ("tests/unit/rank_summary_cases.py::test_skips_when_told: namespaces cannot be made "
            "here") in done.stdout


def test_under_ci_a_run_without_skips_passes_and_a_plain_run_ignores_skips():
    assert run_cases(CI="true").returncode == 0
    assert run_cases(TF_RING_TEST_CASE_SKIP="fine by hand").returncode == 0


class FakeConfig(object):
    def __init__(self, where, *args):
        self.invocation_params = type("Params", (), {"dir": where})()
        self.args = list(args)


@pytest.mark.parametrize("where, args, checked", [
    (REPO, ["tests"], True),                                  # the README's command
    (REPO, ["tests/"], True),
    (os.path.join(REPO, "tests"), ["."], True),
    (REPO, ["tests/unit"], False),                            # a tier by hand
    (REPO, ["tests/multihost/test_hierarchical.py"], False),
    (REPO, ["tests/unit", "tests/launcher"], False),
])
def test_the_skip_check_covers_the_whole_suite_not_a_tier(monkeypatch, where, args, checked):
    import conftest
    for name in ("CI", rs.SUMMARY_VAR, "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert conftest._whole_suite_or_ci(FakeConfig(where, *args)) is checked
    monkeypatch.setenv("CI", "true")
    assert conftest._whole_suite_or_ci(FakeConfig(where, *args)) is True
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "0")  # a rank's own pytest: its launcher judges
    assert conftest._whole_suite_or_ci(FakeConfig(where, *args)) is False
