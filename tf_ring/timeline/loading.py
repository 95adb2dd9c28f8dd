"""Loads a timeline file, recovering what it can from a truncated one.

A job killed mid-write leaves the JSON array unterminated, possibly cut inside
an event; every complete event before the cut is still worth reading.
"""
import collections
import json

Trace = collections.namedtuple("Trace", "events truncated")

_SKIPPABLE = " \t\r\n,"


def _recover_events(text):
    """Decodes array elements one by one until the text runs out or breaks."""
    decoder = json.JSONDecoder()
    start = text.find("[")
    if start < 0:
        raise ValueError("not a Chrome trace: no JSON array of events found")
    events, pos = [], start + 1
    while True:
        while pos < len(text) and text[pos] in _SKIPPABLE:
            pos += 1
        if pos >= len(text) or text[pos] == "]":
            return events
        try:
            event, pos = decoder.raw_decode(text, pos)
        except ValueError:
            return events  # cut mid-event: keep the complete ones
        events.append(event)


def parse_trace(text):
    """A Trace from the file's text: its event dicts, and whether it was cut short."""
    try:
        data = json.loads(text)
        truncated = False
    except ValueError:
        data, truncated = _recover_events(text), True
    if isinstance(data, dict):  # Chrome's other layout: {"traceEvents": [...]}
        data = data.get("traceEvents", [])
    if not isinstance(data, list):
        raise ValueError("not a Chrome trace: expected a JSON array of events")
    return Trace([e for e in data if isinstance(e, dict)], truncated)


def load_trace(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return parse_trace(f.read())
