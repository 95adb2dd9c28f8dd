"""The launching tests' judgement of their ranks (tests/rank_summaries.py)
on real ranks under tfringrun: every rank's summary line comes through
mpirun's merged output, a skip on every rank skips the launching test with
its reason, and a skip on one rank only fails it. The ranks run a tiny
file without TensorFlow (tests/unit/rank_summary_cases.py)."""
import os

import pytest

from conftest import REPO, rank_pytest_command, run_ranks_pytest

CASES = os.path.join(REPO, "tests", "unit", "rank_summary_cases.py")


@pytest.mark.parametrize("np", [2, 3])
def test_every_rank_passing_passes(np):
    result = run_ranks_pytest(np, rank_pytest_command(CASES), timeout=120)
    assert result.returncode == 0


def test_a_skip_on_every_rank_skips_the_launching_test_with_its_reason():
    with pytest.raises(pytest.skip.Exception) as skipped:
        run_ranks_pytest(2, rank_pytest_command(CASES), timeout=120,
                         env={"TF_RING_TEST_CASE_SKIP": "no device here"})
    assert ("tests/unit/rank_summary_cases.py::test_skips_when_told on rank(s) 0,1: "
            "no device here") in str(skipped.value)


def test_a_skip_on_one_rank_fails_the_launching_test():
    with pytest.raises(pytest.fail.Exception) as failed:
        run_ranks_pytest(3, rank_pytest_command(CASES), timeout=120,
                         env={"TF_RING_TEST_CASE_SKIP": "not on this rank",
                              "TF_RING_TEST_CASE_SKIP_RANK": "1"})
    assert ("the ranks ran different tests: rank 0: 2 passed; rank 1: 1 passed, 1 skipped; "
            "rank 2: 2 passed") in str(failed.value)
