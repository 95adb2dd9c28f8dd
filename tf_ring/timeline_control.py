"""Starting and stopping the timeline from Python (the launcher's
--timeline-filename and TF_RING_TIMELINE start it at init() instead)."""
import ctypes
import os

from tf_ring._library import C_API
from tf_ring._logging import get_logger


def start_timeline(path, mark_cycles=False):
    """Starts writing a Chrome trace (Perfetto, chrome://tracing) to `path`.

    Call it on every rank after init(); rank 0 writes the file, replacing a
    timeline already being written. Summarize it with
    `python -m tf_ring.timeline summarize PATH`.
    """
    error = ctypes.create_string_buffer(1024)
    if C_API.tf_ring_start_timeline(os.fsencode(os.path.abspath(path)), int(bool(mark_cycles)),
                                    error, len(error)) != 0:
        raise RuntimeError("tf_ring.start_timeline(%r) failed: %s" % (path, error.value.decode()))
    get_logger().info("timeline: rank 0 writes %s", os.path.abspath(path))


def stop_timeline():
    """Flushes and closes the timeline; the file is complete JSON afterwards."""
    C_API.tf_ring_stop_timeline()
