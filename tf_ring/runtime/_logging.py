"""tf_ring's Python logger, writing the same lines as the C++ engine so the
two interleave readably on stderr:

    [HH:MM:SS.mmm tf_ring rank R LEVEL] message

The level comes from TF_RING_LOG_LEVEL (trace, debug, info, warning, error;
default warning), read once when the logger is first asked for, as the
engine reads it once too.
"""
import logging
import os
import threading
import time

from tf_ring.plumbing import env_names

TRACE = 5  # below DEBUG, for per-tensor detail
logging.addLevelName(TRACE, "TRACE")

LOGGER_NAME = "tf_ring"
_LEVELS = {"trace": TRACE, "debug": logging.DEBUG, "info": logging.INFO,
           "warning": logging.WARNING, "error": logging.ERROR}


def level_from_env(environ=None):
    """The logging level TF_RING_LOG_LEVEL names; unknown or unset means warning,
    matching the engine (which never refuses to start over a log level)."""
    value = (os.environ if environ is None else environ).get(env_names.LOG_LEVEL, "")
    return _LEVELS.get(value.strip().lower(), logging.WARNING)


def rank_from_env(environ=None):
    """This process's rank as mpirun tells it, -1 outside a launcher job."""
    try:
        return int((os.environ if environ is None else environ).get("OMPI_COMM_WORLD_RANK", "-1"))
    except ValueError:
        return -1


def _engine_level_name(levelno):
    """The engine knows five levels; anything in between rounds down (CRITICAL is ERROR)."""
    for threshold, name in ((logging.ERROR, "ERROR"), (logging.WARNING, "WARNING"),
                            (logging.INFO, "INFO"), (logging.DEBUG, "DEBUG")):
        if levelno >= threshold:
            return name
    return "TRACE"


class EngineStyleFormatter(logging.Formatter):
    """Formats records exactly like the engine's Log() in cc/common/observability/logging.cc."""

    def __init__(self, rank):
        super().__init__()
        self.rank = rank

    def format(self, record):
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        millis = int(record.created * 1000) % 1000
        level = _engine_level_name(record.levelno)
        line = "[%s.%03d tf_ring rank %d %s] %s" % (stamp, millis, self.rank, level,
                                                     record.getMessage())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _make_logger():
    logger = logging.getLogger(LOGGER_NAME)
    logger.setLevel(level_from_env())
    # Lines are already complete; the root logger must not print them again.
    logger.propagate = False
    handler = logging.StreamHandler()  # stderr, like the engine
    handler.setFormatter(EngineStyleFormatter(rank_from_env()))
    logger.addHandler(handler)
    return logger


_logger = None
_logger_lock = threading.Lock()


def get_logger():
    """The "tf_ring" logger, configured on first use (once, even across threads)."""
    global _logger
    with _logger_lock:
        if _logger is None:
            _logger = _make_logger()
    return _logger
