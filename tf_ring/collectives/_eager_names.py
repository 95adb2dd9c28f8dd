"""Names for eager collectives called without name=.

Ranks match collectives by name, so an automatic name must come out the same
on every rank, and two collectives in flight at once on one rank must get
different names. Eagerly a Python thread waits for each collective before
its next, so only collectives of different threads can be in flight
together: the name is the op and the calling thread's name ("allreduce.eager"
in the main thread, as before threads had names of their own;
"allreduce.eager/Thread-1" in another). Thread names are equal on every rank
when the threads are created in the same order (Thread-1, Thread-2, ...) or
named. The call site is left out on purpose: code that calls one collective
from different lines on different ranks (if rank == 0: broadcast(a) else:
broadcast(b)) must still match. The name is the same at every call, so
repeated calls hit the response cache, and each name costs one of
TensorFlow's cached eager kernels: never put a counter in it.
"""
import re
import threading

# (prefix, suffix, thread name) -> name; grows with the threads' names only, dropped when too big.
_CACHE = {}
_CACHE_LIMIT = 4096
_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]+")


def eager_name(prefix, suffix=".eager"):
    """prefix + suffix, followed by /thread name outside the main thread."""
    if threading.get_ident() == threading.main_thread().ident:
        return prefix + suffix
    thread_name = threading.current_thread().name
    key = (prefix, suffix, thread_name)
    name = _CACHE.get(key)
    if name is None:
        name = "%s%s/%s" % (prefix, suffix, _UNSAFE.sub("_", thread_name).strip("_") or "_")
        if len(_CACHE) >= _CACHE_LIMIT:
            _CACHE.clear()
        _CACHE[key] = name
    return name
