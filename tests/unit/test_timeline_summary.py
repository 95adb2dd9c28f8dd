"""tf_ring.timeline: loading (including truncated files), the summary's
numbers, the CLI's text, and the --plot PNG, on a small synthetic trace
written exactly as the engine's timeline writer lays it out."""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO
from tf_ring.timeline import cli, load_trace, parse_trace, plotting, summarize


def meta_row(tid, name):
    return {"name": "thread_name", "ph": "M", "pid": 0, "tid": tid, "args": {"name": name}}


def phase(name, tid, ts, dur, **args):
    return {"name": name, "ph": "X", "pid": 0, "tid": tid, "ts": float(ts), "dur": float(dur),
            "args": args}


def cycle(k, ts):
    return {"name": "CYCLE", "ph": "i", "s": "g", "pid": 0, "tid": 0, "ts": float(ts),
            "args": {"cycle": k}}


KERNEL, BIAS, WEIGHTS = 1, 2, 3
FUSED = dict(bytes=4096, tensors_in_batch=2, transport="shm")

EVENTS = [
    {"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "tf_ring rank 0"}},
    meta_row(0, "engine cycles"),
    meta_row(KERNEL, "grad/dense/kernel"),
    meta_row(BIAS, "grad/dense/bias"),
    meta_row(WEIGHTS, "broadcast/w"),
    cycle(0, 0), cycle(1, 2100), cycle(2, 5000),
    # Step 1: kernel and bias negotiate through rank 0 and fuse into one allreduce.
    phase("QUEUE", KERNEL, 0, 100),
    phase("NEGOTIATE", KERNEL, 100, 2000, via="coordinator", arrived=[0, 2, 1], waited_for=[2, 1]),
    phase("MEMCPY_IN_FUSION_BUFFER", KERNEL, 2100, 50),
    phase("ALLREDUCE", KERNEL, 2150, 400, **FUSED),
    phase("MEMCPY_OUT_FUSION_BUFFER", KERNEL, 2550, 50),
    phase("QUEUE", BIAS, 10, 90),
    phase("NEGOTIATE", BIAS, 100, 1000, via="coordinator", arrived=[0, 1, 2], waited_for=[2]),
    phase("MEMCPY_IN_FUSION_BUFFER", BIAS, 2100, 50),
    phase("ALLREDUCE", BIAS, 2150, 400, **FUSED),
    phase("MEMCPY_OUT_FUSION_BUFFER", BIAS, 2550, 50),
    # Step 2: kernel hits the cache; bias waits long for rank 2 again.
    phase("QUEUE", KERNEL, 5000, 200),
    phase("NEGOTIATE", KERNEL, 5200, 300, via="cache"),
    phase("ALLREDUCE", KERNEL, 5500, 300, bytes=2048, tensors_in_batch=1, transport="mpi"),
    phase("NEGOTIATE", BIAS, 5200, 3000, via="coordinator", arrived=[0, 1, 2], waited_for=[2]),
    # A broadcast nobody was late for, which failed.
    phase("QUEUE", WEIGHTS, 0, 10),
    phase("NEGOTIATE", WEIGHTS, 10, 500, via="coordinator", arrived=[0, 1, 2], waited_for=[]),
    phase("BROADCAST", WEIGHTS, 510, 90, bytes=64, tensors_in_batch=1, transport="mpi",
          error="root rank mismatch"),
    # Things a newer writer might add: readers must carry on.
    dict(phase("FUTURE_PHASE", KERNEL, 9000, 100), extra_field=[1, 2]),
    {"name": "memory", "ph": "C", "pid": 0, "ts": 50.0, "args": {"bytes": 1}},
]


def trace_text(events):
    """Laid out like the writer: one event per line."""
    return "[\n" + ",\n".join(json.dumps(e) for e in events) + "\n]\n"


@pytest.fixture
def trace_file(tmp_path):
    path = tmp_path / "timeline.json"
    path.write_text(trace_text(EVENTS))
    return str(path)


def test_phase_totals():
    s = summarize(EVENTS)
    got = {p.phase: (p.events, p.total_us, p.mean_us, p.max_us) for p in s.phases}
    assert got == {
        "QUEUE": (4, 400.0, 100.0, 200.0),
        "NEGOTIATE": (5, 6800.0, 1360.0, 3000.0),
        "MEMCPY_IN_FUSION_BUFFER": (2, 100.0, 50.0, 50.0),
        "ALLREDUCE": (3, 1100.0, 1100.0 / 3, 400.0),
        "BROADCAST": (1, 90.0, 90.0, 90.0),
        "MEMCPY_OUT_FUSION_BUFFER": (2, 100.0, 50.0, 50.0),
        "FUTURE_PHASE": (1, 100.0, 100.0, 100.0),
    }
    # A tensor's life in order, unknown phases last.
    assert [p.phase for p in s.phases] == [
        "QUEUE", "NEGOTIATE", "MEMCPY_IN_FUSION_BUFFER", "ALLREDUCE", "BROADCAST",
        "MEMCPY_OUT_FUSION_BUFFER", "FUTURE_PHASE"]
    assert sum(p.share for p in s.phases) == pytest.approx(1.0)
    assert {p.phase: p.share for p in s.phases}["NEGOTIATE"] == pytest.approx(6800 / 8690)


def test_top_waiting_tensors_and_the_ranks_they_waited_for():
    waits = summarize(EVENTS).waits
    assert [(w.tensor, w.negotiations, w.total_us, w.mean_us, w.via_coordinator, w.waited_for)
            for w in waits] == [
        ("grad/dense/bias", 2, 4000.0, 2000.0, 2, [(2, 2)]),
        ("grad/dense/kernel", 2, 2300.0, 1150.0, 1, [(1, 1), (2, 1)]),
        ("broadcast/w", 1, 500.0, 500.0, 1, []),
    ]


def test_totals():
    s = summarize(EVENTS)
    assert s.process == "tf_ring rank 0"
    assert s.tensors == 3
    assert s.cycles == 3
    assert s.span_us == 9100.0  # first QUEUE at 0 to the end of FUTURE_PHASE
    assert s.errors == 1


def test_without_cycle_markers_cycles_are_unknown():
    assert summarize([e for e in EVENTS if e.get("name") != "CYCLE"]).cycles is None


def test_cli_prints_the_tables(trace_file, capsys):
    assert cli.main(["summarize", trace_file, "--top", "2"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.splitlines()
    assert lines[0] == "tf_ring timeline: tf_ring rank 0"
    header = lines.index("Time per phase (summed over tensors; a fused batch counts once per tensor):")
    assert lines[header + 1].split() == ["phase", "events", "total", "ms", "mean", "ms", "max", "ms",
                                         "share", "%"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[header + 3:header + 10]}
    assert rows["NEGOTIATE"] == ["5", "6.800", "1.360", "3.000", "78.3"]
    assert rows["QUEUE"] == ["4", "0.400", "0.100", "0.200", "4.6"]
    top = lines.index("Top 2 tensors by time waiting in NEGOTIATE:")
    assert lines[top + 3].split() == ["grad/dense/bias", "2", "4.000", "2.000", "2", "2", "(2x)"]
    assert lines[top + 4].split() == ["grad/dense/kernel", "2", "2.300", "1.150", "1", "1", "(1x),",
                                      "2", "(1x)"]
    assert "broadcast/w" not in out  # third by wait, cut by --top 2
    assert "  tensors:    3" in lines and "  cycles:     3" in lines
    assert "  wall span:  9.100 ms" in lines
    assert "  errors:     1 collective(s) reported an error" in lines
    # Columns line up: every table row is as wide as its header or narrower.
    assert len(lines[header + 2]) >= max(len(l) for l in lines[header + 3:header + 10])


def test_truncated_mid_event_recovers_complete_events(tmp_path, capsys):
    text = trace_text(EVENTS)
    cut = text.rindex('"FUTURE_PHASE"')  # inside the second-to-last event
    path = tmp_path / "killed.json"
    path.write_text(text[:cut])
    trace = load_trace(str(path))
    assert trace.truncated
    assert trace.events == EVENTS[:-2]
    assert cli.main(["summarize", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "is truncated" in err and "%d complete events" % (len(EVENTS) - 2) in err
    assert "FUTURE_PHASE" not in out and "NEGOTIATE" in out


def test_truncated_after_a_comma_and_unterminated():
    text = trace_text(EVENTS)
    unterminated = text[:text.rindex("]")]
    assert parse_trace(unterminated) == (EVENTS, True)
    after_comma = "[\n" + ",\n".join(json.dumps(e) for e in EVENTS[:5]) + ",\n"
    assert parse_trace(after_comma) == (EVENTS[:5], True)
    assert parse_trace("[") == ([], True)
    assert parse_trace(trace_text(EVENTS)) == (EVENTS, False)


def test_unreadable_file_is_reported(tmp_path, capsys):
    path = tmp_path / "junk.json"
    path.write_text("this is not a trace")
    assert cli.main(["summarize", str(path)]) == 1
    assert "not a Chrome trace" in capsys.readouterr().err
    assert cli.main(["summarize", str(tmp_path / "missing.json")]) == 1


def test_plot_writes_a_png(trace_file, tmp_path):
    png = tmp_path / "summary.png"
    assert cli.main(["summarize", trace_file, "--plot", str(png)]) == 0
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_how_to_install(trace_file, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(plotting, "have_matplotlib", lambda: False)
    png = tmp_path / "never.png"
    assert cli.main(["summarize", trace_file, "--plot", str(png)]) == 2
    assert "pip install matplotlib" in capsys.readouterr().err
    assert not png.exists()


def test_top_must_be_positive(trace_file, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["summarize", trace_file, "--top", "0"])
    assert e.value.code == 2 and "must be at least 1" in capsys.readouterr().err


def test_module_command_line(trace_file):
    result = subprocess.run([sys.executable, "-m", "tf_ring.timeline", "summarize", trace_file],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "grad/dense/bias" in result.stdout and "wall span:  9.100 ms" in result.stdout


# Loads tf_ring.timeline under an empty stand-in for the tf_ring package, so
# tf_ring/__init__.py (which loads TensorFlow) is out of the picture and only
# the timeline's own imports count.
NO_TENSORFLOW = """
import sys, types
pkg = types.ModuleType("tf_ring"); pkg.__path__ = [sys.argv[1]]
sys.modules["tf_ring"] = pkg
import tf_ring.timeline.cli
sys.argv = ["x", "summarize", sys.argv[2]]
rc = tf_ring.timeline.cli.main()
heavy = [m for m in ("tensorflow", "tf_ring.runtime._library", "numpy") if m in sys.modules]
assert not heavy, heavy
sys.exit(rc)
"""


def test_timeline_tool_needs_neither_tensorflow_nor_the_native_library(trace_file):
    result = subprocess.run([sys.executable, "-c", NO_TENSORFLOW, os.path.join(REPO, "tf_ring"),
                             trace_file], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "grad/dense/bias" in result.stdout
