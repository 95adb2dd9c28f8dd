"""Runs every tests/parallel/mpi_*.py file on 2 and on 3 real processes.

The mpi_ prefix keeps the single-process run from collecting them.

Each parallel file asserts, on every rank, results computed independently
with NumPy from all ranks' known inputs.
"""
import glob
import os

import pytest

from conftest import PARALLEL_DIR, run_parallel_pytest

FILES = sorted(glob.glob(os.path.join(PARALLEL_DIR, "mpi_*.py")))


@pytest.mark.parametrize("np", [2, 3])
@pytest.mark.parametrize("path", FILES, ids=[os.path.basename(f)[4:-3] for f in FILES])
def test_parallel_file(path, np):
    result = run_parallel_pytest(path, np)
    # Every rank must have run the tests, not collected nothing.
    assert result.stdout.count(" passed") >= np, result.stdout[-4000:]
