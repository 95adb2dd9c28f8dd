"""Starting and stopping the timeline from Python (the launcher's
--timeline-filename and TF_RING_TIMELINE start it at init() instead)."""
import os

from tf_ring.runtime._library import ENGINE
from tf_ring.runtime._logging import get_logger


def start_timeline(path, mark_cycles=False):
    """Starts writing a Chrome trace (Perfetto, chrome://tracing) to `path`.

    Call it on every rank after init(); rank 0 writes the file, replacing a
    timeline already being written. Summarize it with
    `python -m tf_ring.timeline summarize PATH`.
    """
    try:
        ENGINE.start_timeline(os.fsencode(os.path.abspath(path)), bool(mark_cycles))
    except RuntimeError as e:
        raise RuntimeError("tf_ring.start_timeline(%r) failed: %s" % (path, e)) from None
    get_logger().info("timeline: rank 0 writes %s", os.path.abspath(path))


def stop_timeline():
    """Flushes and closes the timeline; the file is complete JSON afterwards."""
    ENGINE.stop_timeline()
