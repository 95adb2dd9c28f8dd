"""Real jobs across 2 simulated hosts x 2 ranks: the collectives, tape and
join parallel files, and the Keras digits example to the same accuracy
bar as on one host (tests/parallel/test_examples_keras.py)."""
import os
import re
import sys

import pytest

from conftest import PARALLEL_DIR, REPO, run_parallel_pytest, run_under_launcher
from multihost.simulated_hosts import SimulatedHosts, namespaces_available

AVAILABLE, WHY = namespaces_available()
pytestmark = pytest.mark.skipif(not AVAILABLE, reason=WHY)

RANKS_PER_HOST = 2
NP = 2 * RANKS_PER_HOST
# One job for all three files: each rank imports TensorFlow once instead of
# three times, which matters with 4 ranks on a small machine. Keras across
# hosts is trained below (and by the Spark and Ray tests); its parallel file
# runs on one host in parallel/test_parallel.py.
FILES = ["mpi_collectives.py", "mpi_tape.py", "mpi_join.py"]


@pytest.fixture(scope="module")
def hosts():
    with SimulatedHosts(2) as made:
        yield made


def test_parallel_files_on_two_hosts(hosts):
    paths = [os.path.join(PARALLEL_DIR, name) for name in FILES]
    result = run_parallel_pytest(paths[0], NP, timeout=900, extra=paths[1:],
                                 launcher_args=hosts.launcher_flags(RANKS_PER_HOST))
    summaries = re.findall(r"(\d+) passed", result.stdout)
    assert len(summaries) == NP, result.stdout[-4000:]  # every rank ran the files
    assert len(set(summaries)) == 1 and int(summaries[0]) >= 50, summaries


def test_keras_digits_trains_across_two_hosts(hosts, tmp_path):
    script = os.path.join(REPO, "keras_examples", "keras_digits.py")
    result = run_under_launcher(
        NP, hosts.launcher_flags(RANKS_PER_HOST)
        + [sys.executable, script, "--epochs", "3", "--checkpoint-dir", str(tmp_path)], timeout=600,
        env={"PYTHONPATH": REPO})  # tf_ring from this tree where it is not installed
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    match = re.search(r"test accuracy: ([0-9.]+) \(%d ranks, Keras 3\); weights identical on every "
                      r"rank: True" % NP, output)
    assert match, output[-6000:]
    assert float(match.group(1)) > 0.9
    assert os.listdir(tmp_path) == ["keras_digits.keras"]  # rank 0 alone wrote it
