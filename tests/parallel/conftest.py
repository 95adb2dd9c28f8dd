import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tf_ring as hvd  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def tf_ring_session():
    hvd.init()
    yield
