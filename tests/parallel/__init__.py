"""Parallel test files (mpi_*.py), run under the launcher by tests/test_parallel.py.

Being a package gives this directory's conftest its own module name, so it
does not shadow tests/conftest.py when pytest collects the whole tests/ tree.
"""
