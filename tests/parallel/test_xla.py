"""XLA lowering (issue 21): tests/parallel/ranks/xla_cases.py on 2 and 3 ranks."""
import os

import pytest

from conftest import PARALLEL_DIR, run_parallel_pytest


@pytest.mark.parametrize("np", [2, 3])
def test_xla_cases(np):
    run_parallel_pytest(os.path.join(PARALLEL_DIR, "xla_cases.py"), np)
