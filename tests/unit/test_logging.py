"""tf_ring's Python logger: the engine's line format, levels from
TF_RING_LOG_LEVEL, rank from mpirun's environment. Each case runs in a fresh
interpreter because the level and rank are read once."""
import importlib.util
import logging
import os
import re
import subprocess
import sys
import time

import pytest

from conftest import REPO

LINE = re.compile(r"^\[(\d\d):(\d\d):(\d\d)\.(\d{3}) tf_ring rank (-?\d+) "
                  r"(TRACE|DEBUG|INFO|WARNING|ERROR)\] (.*)$")

# Loads tf_ring/runtime/_logging.py alone: importing the tf_ring package would load
# TensorFlow, which this module must not need.
EMIT_ALL = """
import importlib.util, logging, sys
spec = importlib.util.spec_from_file_location("tf_ring_logging", sys.argv[1])
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
log = mod.get_logger()
assert log is mod.get_logger() and len(log.handlers) == 1
log.log(mod.TRACE, "t msg")
log.debug("d msg")
log.info("i msg")
log.warning("w msg %d", 42)
log.error("e msg")
log.critical("c msg")
"""


def emit_all(level=None, rank=None):
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_RING_LOG_LEVEL", "OMPI_COMM_WORLD_RANK")}
    if level is not None:
        env["TF_RING_LOG_LEVEL"] = level
    if rank is not None:
        env["OMPI_COMM_WORLD_RANK"] = rank
    result = subprocess.run([sys.executable, "-c", EMIT_ALL,
                             os.path.join(REPO, "tf_ring", "runtime", "_logging.py")],
                            capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    return result.stderr.splitlines()


def parsed(lines):
    out = []
    for line in lines:
        match = LINE.match(line)
        assert match, "not in the engine's format: %r" % line
        out.append(match.groups()[4:])
    return out


def test_default_level_is_warning_and_rank_is_minus_one():
    assert parsed(emit_all()) == [("-1", "WARNING", "w msg 42"), ("-1", "ERROR", "e msg"),
                                  ("-1", "ERROR", "c msg")]


@pytest.mark.parametrize("level,first", [
    ("trace", "TRACE"), ("DEBUG", "DEBUG"), ("info", "INFO"), ("warning", "WARNING"),
    ("error", "ERROR"), ("nonsense", "WARNING"), ("", "WARNING"),
])
def test_level_from_env(level, first):
    names = ["TRACE", "DEBUG", "INFO", "WARNING", "ERROR"]
    expected = names[names.index(first):] + ["ERROR"]  # the last line is critical()
    assert [lvl for _, lvl, _ in parsed(emit_all(level=level))] == expected


def test_rank_from_mpirun_environment():
    assert {rank for rank, _, _ in parsed(emit_all(level="info", rank="3"))} == {"3"}
    assert {rank for rank, _, _ in parsed(emit_all(rank="junk"))} == {"-1"}


def test_timestamp_is_a_wall_clock_time_of_day():
    h, m, s, ms = LINE.match(emit_all()[0]).groups()[:4]
    assert int(h) < 24 and int(m) < 60 and int(s) < 61 and int(ms) < 1000


def test_formatter_matches_the_engine_byte_for_byte():
    spec = importlib.util.spec_from_file_location(
        "tf_ring_logging_under_test", os.path.join(REPO, "tf_ring", "runtime", "_logging.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    record = logging.LogRecord("tf_ring", logging.INFO, __file__, 1, "hello %s", ("x",), None)
    record.created = 1700000000.0456  # .045 s after a whole second
    stamp = time.strftime("%H:%M:%S", time.localtime(1700000000))
    assert mod.EngineStyleFormatter(2).format(record) == "[%s.045 tf_ring rank 2 INFO] hello x" % stamp
    assert mod.level_from_env({"TF_RING_LOG_LEVEL": "Trace"}) == mod.TRACE == 5
    assert logging.getLevelName(5) == "TRACE"
