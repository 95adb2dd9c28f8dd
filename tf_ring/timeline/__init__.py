"""Reading tf_ring timelines (Chrome trace JSON written by rank 0) and saying
where the time went: `python -m tf_ring.timeline summarize out.json`.

Pure Python on purpose: no TensorFlow and no native library, so a trace can
be studied on any machine it is copied to.
"""
from tf_ring.timeline.loading import Trace, load_trace, parse_trace
from tf_ring.timeline.summarizing import PHASE_ORDER, Summary, summarize

__all__ = ["PHASE_ORDER", "Summary", "Trace", "load_trace", "parse_trace", "summarize"]
