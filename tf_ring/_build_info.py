"""Reads tf_ring/_build_info.json without importing TensorFlow."""
import json
import os

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_build_info.json")


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
