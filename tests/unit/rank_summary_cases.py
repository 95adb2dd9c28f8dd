"""Run by tests/unit/test_rank_summaries.py in a pytest of its own (not
collected by the suite: its name does not start with test_), and on ranks by
tests/launcher/test_rank_summaries_jobs.py: one test that passes, and one
that skips with the reason in TF_RING_TEST_CASE_SKIP, if set (only on the
rank in TF_RING_TEST_CASE_SKIP_RANK, if that is set)."""
import os

import pytest


def test_passes():
    assert 1 + 1 == 2


def test_skips_when_told():
    only = os.environ.get("TF_RING_TEST_CASE_SKIP_RANK")
    if only and os.environ.get("OMPI_COMM_WORLD_RANK") != only:
        return
    if os.environ.get("TF_RING_TEST_CASE_SKIP"):
        pytest.skip(os.environ["TF_RING_TEST_CASE_SKIP"])
