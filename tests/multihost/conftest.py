"""Simulated hosts see pytest's temporary directory as a cluster's shared
file system would show it (their own /tmp is private): jobs write their
results and markers there for the tests to read."""
import pytest

from multihost import simulated_hosts


@pytest.fixture(autouse=True, scope="session")
def _share_pytest_temporary_directory(tmp_path_factory):
    base = str(tmp_path_factory.getbasetemp())
    simulated_hosts.SHARED_PATHS.append(base)
    yield
    simulated_hosts.SHARED_PATHS.remove(base)
