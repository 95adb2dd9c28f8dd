"""The tf.function and MonitoredTrainingSession examples train on 2 ranks,
reach a useful accuracy and end with identical weights everywhere."""
import os
import re
import sys

import pytest

from conftest import REPO, run_under_launcher

EXAMPLES = {
    "tf_function_digits.py": ["--epochs", "2"],
    "monitored_session.py": ["--steps", "150"],
}


@pytest.mark.parametrize("script", sorted(EXAMPLES))
def test_example_trains_to_identical_weights(script):
    path = os.path.join(REPO, "keras_examples", script)
    result = run_under_launcher(2, [sys.executable, path] + EXAMPLES[script], timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    match = re.search(r"test accuracy ([0-9.]+); weights identical on all 2 ranks: True", output)
    assert match, output[-6000:]
    assert float(match.group(1)) > 0.7
