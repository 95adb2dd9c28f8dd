"""The TensorFlow 2.15 suite, run by .ci/tf215.sh (not collected by the main
run: its name does not start with test_). On 2.15 tf.keras is Keras 2 and
tf.estimator exists; this checks the v1 / Estimator / Keras 2 paths and that
the collectives built against 2.15 give the same answers."""
import os
import re
import sys

import pytest
import tensorflow as tf

from conftest import PARALLEL_DIR, REPO, run_parallel_pytest, run_under_launcher

PARALLEL_FILES = ["mpi_v1_session.py", "mpi_tape.py", "mpi_exchange.py",
                  "mpi_grouped_and_objects.py", "mpi_collectives.py"]


def test_suite_runs_on_tensorflow_2_15_with_keras_2_and_estimator():
    assert tf.__version__.startswith("2.15."), tf.__version__
    import keras
    assert keras.__version__.startswith("2."), keras.__version__
    assert hasattr(tf, "estimator")


@pytest.mark.parametrize("np", [2, 3])
@pytest.mark.parametrize("name", PARALLEL_FILES)
def test_parallel_file_on_tf215(name, np):
    result = run_parallel_pytest(os.path.join(PARALLEL_DIR, name), np)
    assert result.stdout.count(" passed") >= np, result.stdout[-4000:]


@pytest.mark.parametrize("np", [2, 3])
def test_estimator_example_trains_to_identical_weights(np):
    path = os.path.join(REPO, "keras_examples", "estimator_digits.py")
    result = run_under_launcher(np, [sys.executable, path, "--steps", "200"], timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    match = re.search(r"test accuracy ([0-9.]+); weights identical on all %d ranks: True" % np,
                      output)
    assert match, output[-6000:]
    assert float(match.group(1)) > 0.7
