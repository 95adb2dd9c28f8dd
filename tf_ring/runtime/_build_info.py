"""Reads tf_ring/_build_info.json without importing TensorFlow."""
import json
import os

# The built files (_tf_ring.so, _build_info.json) sit at the package's top,
# where setup.py puts them; this module lives one folder below.
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATH = os.path.join(PACKAGE_DIR, "_build_info.json")
LIBRARY_PATH = os.path.join(PACKAGE_DIR, "_tf_ring.so")


def tf_ring_version():
    try:
        with open(PATH) as f:
            return json.load(f).get("tf_ring_version", "unknown")
    except (OSError, ValueError):
        return "unknown"


def xla_support():
    """Whether this build holds the XLA lowering (cc/xla_ops/): its
    collectives then compile inside tf.function(jit_compile=True)."""
    try:
        with open(PATH) as f:
            return bool(json.load(f).get("xla_lowering", False))
    except (OSError, ValueError):
        return False
