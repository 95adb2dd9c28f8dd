"""Loads tf_ring's shared library once: TensorFlow sees its ops, Python its
engine module (pybind11, cc/python/).

Both come from the same file, so the dynamic loader maps it once and the ops
and init() share one engine.
"""
import importlib.util
import json
import os

import tensorflow as tf

from tf_ring.runtime._build_info import LIBRARY_PATH, PATH as BUILD_INFO_PATH

REBUILD_HINT = ("Rebuild tf_ring against the TensorFlow in this environment: "
                "pip install --no-build-isolation --force-reinstall --no-deps .  "
                "(from the tf_ring source tree)")


def build_info():
    """What the library was built against (TensorFlow, MPI, Python)."""
    if not os.path.exists(BUILD_INFO_PATH):
        raise ImportError("tf_ring's native library is not built (no %s). %s"
                          % (BUILD_INFO_PATH, REBUILD_HINT))
    with open(BUILD_INFO_PATH) as f:
        return json.load(f)


def _check_tensorflow_version(info):
    built, running = info.get("tf_version"), tf.__version__
    if built != running:
        raise ImportError(
            "tf_ring was built against TensorFlow %s but TensorFlow %s is installed; "
            "the C++ ops would not load safely. %s" % (built, running, REBUILD_HINT))


def _import_engine_module(path):
    """The pybind11 module compiled into the library TensorFlow just loaded.
    Importing the same file reuses the dynamic loader's mapping of it, so
    the module and the ops see one engine (one copy of its statics)."""
    spec = importlib.util.spec_from_file_location("tf_ring._tf_ring", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _exempt_from_auto_control_deps(ops_module):
    """tf.function chains stateful ops in program order. Collectives must not
    be chained (they run concurrently and fuse), exactly like TensorFlow's own
    collective ops, so they join TensorFlow's set of asynchronous stateful ops."""
    from tensorflow.python.framework import auto_control_deps as acd
    # join() and barrier() are the exceptions: they must stay after the
    # collectives before them.
    ordered = ("TfRingJoin", "TfRingBarrier")
    ours = {name for name in dir(ops_module) if name.startswith("TfRing") and name not in ordered}
    if hasattr(acd, "ASYNC_STATEFUL_OPS"):
        acd.ASYNC_STATEFUL_OPS = frozenset(acd.ASYNC_STATEFUL_OPS) | ours


def _load():
    _check_tensorflow_version(build_info())
    if not os.path.exists(LIBRARY_PATH):
        raise ImportError("tf_ring's native library is missing at %s. %s" % (LIBRARY_PATH, REBUILD_HINT))
    try:
        ops = tf.load_op_library(LIBRARY_PATH)
    except tf.errors.NotFoundError as e:
        raise ImportError("tf_ring's native library failed to load (%s). %s" % (e, REBUILD_HINT)) from e
    _exempt_from_auto_control_deps(ops)
    # The same path returns the handle TensorFlow already holds.
    return ops, _import_engine_module(LIBRARY_PATH)


OPS, ENGINE = _load()
