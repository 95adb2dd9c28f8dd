"""Loads tf_ring's shared library once: TensorFlow sees its ops, ctypes its C API.

Both handles come from the same file, so the dynamic loader maps it once and
the ops and init() share one engine.
"""
import ctypes
import json
import os

import tensorflow as tf

_HERE = os.path.dirname(os.path.abspath(__file__))
LIBRARY_PATH = os.path.join(_HERE, "_tf_ring.so")
BUILD_INFO_PATH = os.path.join(_HERE, "_build_info.json")
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


def _declare_c_api(cdll):
    c = ctypes
    cdll.tf_ring_init.argtypes = [c.c_void_p, c.c_char_p, c.c_int]
    cdll.tf_ring_init.restype = c.c_int
    cdll.tf_ring_shutdown.restype = None
    cdll.tf_ring_finalize_mpi.restype = None
    cdll.tf_ring_is_initialized.restype = c.c_int
    cdll.tf_ring_topology.argtypes = [c.POINTER(c.c_int)]
    cdll.tf_ring_topology.restype = c.c_int
    cdll.tf_ring_stats.argtypes = [c.POINTER(c.c_int64), c.c_int]
    cdll.tf_ring_stats.restype = c.c_int
    cdll.tf_ring_reset_stats.restype = None
    cdll.tf_ring_start_timeline.argtypes = [c.c_char_p, c.c_int, c.c_char_p, c.c_int]
    cdll.tf_ring_start_timeline.restype = c.c_int
    cdll.tf_ring_stop_timeline.restype = None
    cdll.tf_ring_engine_params.argtypes = [c.POINTER(c.c_int64)]
    cdll.tf_ring_engine_params.restype = None
    cdll.tf_ring_param_history.argtypes = [c.POINTER(c.c_int64), c.c_int]
    cdll.tf_ring_param_history.restype = c.c_int
    cdll.tf_ring_agreed_settings.argtypes = [c.c_char_p, c.c_int]
    cdll.tf_ring_agreed_settings.restype = c.c_int
    cdll.tf_ring_add_process_sets.argtypes = [c.POINTER(c.c_int), c.c_int, c.POINTER(c.c_int32),
                                              c.c_int, c.c_char_p, c.c_int]
    cdll.tf_ring_add_process_sets.restype = c.c_int
    cdll.tf_ring_remove_process_set.argtypes = [c.c_int32, c.c_char_p, c.c_int]
    cdll.tf_ring_remove_process_set.restype = c.c_int
    cdll.tf_ring_process_set_ranks.argtypes = [c.c_int32, c.POINTER(c.c_int), c.c_int]
    cdll.tf_ring_process_set_ranks.restype = c.c_int
    cdll.tf_ring_process_set_ids.argtypes = [c.POINTER(c.c_int32), c.c_int]
    cdll.tf_ring_process_set_ids.restype = c.c_int
    cdll.tf_ring_process_set_stats.argtypes = [c.c_int32, c.POINTER(c.c_int64), c.c_int]
    cdll.tf_ring_process_set_stats.restype = c.c_int
    return cdll


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
    # RTLD_GLOBAL is not needed: the same path returns the handle TF already holds.
    return ops, _declare_c_api(ctypes.CDLL(LIBRARY_PATH))


OPS, C_API = _load()
