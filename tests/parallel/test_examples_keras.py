"""The README's main job, keras_examples/keras_digits.py, trains on 2 and 3
ranks with Keras 3 and with tf_keras, reaches a useful test accuracy and ends
with identical weights on every rank."""
import os
import re
import sys

import pytest

from conftest import REPO, run_under_launcher

SCRIPT = os.path.join(REPO, "keras_examples", "keras_digits.py")


@pytest.mark.parametrize("np", [2, 3])
@pytest.mark.parametrize("flavour", ["Keras 3", "tf_keras"])
def test_keras_digits_trains_to_identical_weights(flavour, np, tmp_path):
    args = ["--epochs", "3", "--checkpoint-dir", str(tmp_path)]
    if flavour == "tf_keras":
        args.append("--tf-keras")
    result = run_under_launcher(np, [sys.executable, SCRIPT] + args, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    match = re.search(r"test accuracy: ([0-9.]+) \(%d ranks, %s\); weights identical on every rank: True"
                      % (np, flavour), output)
    assert match, output[-6000:]
    assert float(match.group(1)) > 0.9
    # Rank 0 alone wrote the checkpoint, in the flavour's own format.
    assert os.listdir(tmp_path) == ["tf_keras_digits.h5" if flavour == "tf_keras" else "keras_digits.keras"]
