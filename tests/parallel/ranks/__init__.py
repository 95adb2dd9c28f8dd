"""The files the ranks run (mpi_*.py and the cases they share), under the
launcher, started by the parallel tier's tests one folder up.

Being a package gives this folder's conftest its own module name, so it does
not shadow tests/conftest.py when pytest collects the whole tests/ tree.
"""
