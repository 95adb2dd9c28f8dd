# The parallel tests' engine fixture and fail-fast hook (tests/parallel/ranks/conftest.py),
# for the files here, which run only under simulated hosts.
from parallel.ranks.conftest import pytest_runtest_logreport, tf_ring_session  # noqa: F401
