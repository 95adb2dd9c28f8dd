"""XLA lowering (issue 21): tests/parallel/ranks/xla_cases.py (the compiled
collectives) and xla_agreement_cases.py (compiled steps agreeing across
ranks) in one launch, on 2 and 3 ranks."""
import os

import pytest

from conftest import PARALLEL_DIR, run_parallel_pytest

FILES = ["xla_cases.py", "xla_agreement_cases.py"]


@pytest.mark.parametrize("np", [2, 3])
def test_xla_cases(np):
    paths = [os.path.join(PARALLEL_DIR, name) for name in FILES]
    run_parallel_pytest(paths[0], np, extra=paths[1:])  # every rank ran them, all passing
