"""Turns timeline events into numbers: time per phase, the tensors that waited
longest in negotiation (and for which ranks), and the trace's totals.

Durations are kept in microseconds, as the trace stores them; the report
converts to milliseconds.
"""
import collections

ENGINE_TID = 0
COLLECTIVES = ("ALLREDUCE", "ALLGATHER", "BROADCAST", "ALLTOALL", "REDUCESCATTER", "JOIN")
# A tensor's life in order; phases outside this list are reported after it.
PHASE_ORDER = (("QUEUE", "NEGOTIATE", "MEMCPY_IN_FUSION_BUFFER") + COLLECTIVES +
               ("MEMCPY_OUT_FUSION_BUFFER",))

PhaseStats = collections.namedtuple("PhaseStats", "phase events total_us mean_us max_us share")
TensorWait = collections.namedtuple(
    "TensorWait", "tensor negotiations total_us mean_us via_coordinator waited_for")
Summary = collections.namedtuple(
    "Summary", "process phases waits tensors cycles span_us errors")


def _number(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _row_names(events):
    """tid -> tensor name, from the thread_name metadata."""
    names = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[e.get("tid")] = str((e.get("args") or {}).get("name", "tid %s" % e.get("tid")))
    return names


def _process_name(events):
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            return str((e.get("args") or {}).get("name", ""))
    return ""


def _phase_key(phase):
    if phase in PHASE_ORDER:
        return (0, PHASE_ORDER.index(phase), phase)
    return (1, 0, phase)


def _complete_events(events):
    """(event, ts, dur) for every well-formed complete ("X") event."""
    for e in events:
        if e.get("ph") != "X":
            continue
        ts, dur = _number(e.get("ts")), _number(e.get("dur"))
        if ts is not None and dur is not None and isinstance(e.get("name"), str):
            yield e, ts, dur


def _phase_stats(complete):
    durations = collections.defaultdict(list)
    for e, _, dur in complete:
        durations[e["name"]].append(dur)
    grand_total = sum(sum(d) for d in durations.values())
    stats = []
    for phase in sorted(durations, key=_phase_key):
        d = durations[phase]
        total = sum(d)
        stats.append(PhaseStats(phase, len(d), total, total / len(d), max(d),
                                total / grand_total if grand_total else 0.0))
    return stats


def _waits(complete, row_names):
    per_tensor = collections.defaultdict(lambda: {"durations": [], "coordinator": 0,
                                                  "waited_for": collections.Counter()})
    for e, _, dur in complete:
        if e["name"] != "NEGOTIATE":
            continue
        tid = e.get("tid")
        entry = per_tensor[row_names.get(tid, "tid %s" % tid)]
        entry["durations"].append(dur)
        args = e.get("args") or {}
        if args.get("via") == "coordinator":
            entry["coordinator"] += 1
        for rank in args.get("waited_for") or []:
            entry["waited_for"][rank] += 1
    waits = []
    for tensor, entry in per_tensor.items():
        d = entry["durations"]
        # Most-waited-for rank first; equal counts by rank number, so output is stable.
        ranks = sorted(entry["waited_for"].items(), key=lambda kv: (-kv[1], str(kv[0])))
        waits.append(TensorWait(tensor, len(d), sum(d), sum(d) / len(d), entry["coordinator"],
                                ranks))
    waits.sort(key=lambda w: (-w.total_us, w.tensor))
    return waits


def _span_us(events):
    starts, ends = [], []
    for e in events:
        ts = _number(e.get("ts"))
        if ts is None or e.get("ph") == "M":
            continue
        starts.append(ts)
        ends.append(ts + (_number(e.get("dur")) or 0.0))
    return max(ends) - min(starts) if starts else 0.0


def summarize(events):
    """A Summary of a list of trace events (as loaded from the file)."""
    complete = list(_complete_events(events))
    row_names = _row_names(events)
    tensor_tids = {tid for tid in row_names if tid != ENGINE_TID}
    tensor_tids |= {e.get("tid") for e, _, _ in complete if e.get("tid") != ENGINE_TID}
    cycle_markers = [e for e in events if e.get("ph") == "i" and e.get("name") == "CYCLE"]
    errors = sum(1 for e, _, _ in complete if (e.get("args") or {}).get("error"))
    return Summary(
        process=_process_name(events),
        phases=_phase_stats(complete),
        waits=_waits(complete, row_names),
        tensors=len(tensor_tids),
        cycles=len(cycle_markers) if cycle_markers else None,
        span_us=_span_us(events),
        errors=errors)
