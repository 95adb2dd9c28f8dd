"""Names for eager collectives called without name=.

Ranks match collectives by name, so an automatic name must come out the same
on every rank running the same program, and two collectives in flight at
once on one rank must get different names. Eagerly a Python thread waits for
each collective before its next, so only collectives of different threads
can be in flight together: the name is the op, the calling thread's name
(left out for the main thread) and the call site, the first frame outside
tf_ring as file name and line. Thread names are equal on every rank when the
threads are created in the same order (Thread-1, Thread-2, ...) or named.
The name is the same at every call from one place in one thread, so repeated
calls hit the response cache, and each name costs one of TensorFlow's cached
eager kernels: never put a counter in it.
"""
import os
import re
import sys
import threading

# (prefix, code, line, thread name) -> name; a program has a bounded number of
# call sites, so this only grows with threads, and is dropped when too big.
_CACHE = {}
_CACHE_LIMIT = 4096
_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]+")


def _outside_tf_ring(frame):
    while frame is not None:
        module = frame.f_globals.get("__name__") or ""
        if module != "tf_ring" and not module.startswith("tf_ring."):
            return frame
        frame = frame.f_back
    return None


def eager_name(prefix):
    """`prefix`, this thread's name and the caller's file:line, e.g.
    "allreduce.eager/train.py.42" or "allreduce.eager/Thread-1/train.py.42"."""
    frame = _outside_tf_ring(sys._getframe(1))
    main = threading.get_ident() == threading.main_thread().ident
    thread_name = "" if main else threading.current_thread().name
    code, line = (frame.f_code, frame.f_lineno) if frame is not None else (None, 0)
    key = (prefix, code, line, thread_name)
    name = _CACHE.get(key)
    if name is None:
        # The file's base name: the same script may sit in different folders on different hosts.
        site = "%s.%d" % (os.path.basename(code.co_filename) if code else "unknown", line)
        parts = [prefix + ".eager"] + ([thread_name] if thread_name else []) + [site]
        name = "/".join(_UNSAFE.sub("_", p).strip("_") or "_" for p in parts)
        if len(_CACHE) >= _CACHE_LIMIT:
            _CACHE.clear()
        _CACHE[key] = name
    return name
