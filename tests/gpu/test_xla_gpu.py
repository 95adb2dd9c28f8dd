"""The XLA "CUDA" handler (cc/xla_ops/gpu_ffi_handlers.cc): collectives in a
jit_compile=True step on a GPU, on 2 and 3 ranks sharing one GPU. Needs a
CUDA GPU, TensorFlow that sees it and a CUDA build of tf_ring; skips
elsewhere, saying which is missing (the GPU machine has no TensorFlow, so
this waits for one that has)."""
import os
import sys

import pytest

from conftest import run_under_launcher

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def _unavailable_reason():
    if os.environ.get("TF_RING_ENGINE_TEST_DEVICE", "cuda") != "cuda":
        return "TF_RING_ENGINE_TEST_DEVICE is not cuda"
    try:
        import tensorflow as tf
    except ImportError:
        return "TensorFlow is not installed (the XLA GPU handler runs inside TensorFlow's XLA)"
    if not tf.config.list_physical_devices("GPU"):
        return "TensorFlow sees no GPU here"
    sys.path.insert(0, REPO)
    from tf_ring.runtime import _build_info
    import json
    with open(_build_info.PATH) as f:
        info = json.load(f)
    if info.get("build") != "cuda" or not info.get("xla_lowering"):
        return "tf_ring is not a CUDA build with the XLA lowering (%s)" % info.get("build")
    return None


REASON = _unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=str(REASON))


@pytest.mark.parametrize("np", [2, 3])
def test_collectives_inside_a_compiled_gpu_step(np):
    result = run_under_launcher(np, ["--share-gpu", sys.executable, os.path.join(HERE, "xla_gpu_job.py")],
                                timeout=600, env={"PYTHONPATH": REPO})
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]
    assert result.stdout.count("XLA_GPU_OK") == np, result.stdout[-3000:]
