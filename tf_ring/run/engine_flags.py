"""The launcher's engine flags: one table that feeds argparse, --help and the
environment each rank starts with, so the three can never disagree.

Each flag sets one TF_RING_* variable that the engine reads at init(). A flag
given on the command line overrides the same variable already in the
environment; a flag left out leaves the environment alone.
"""
import argparse
import collections
import math
import os

from tf_ring.plumbing import env_names

GROUP_ENGINE = "engine tuning"
GROUP_TIMELINE = "timeline & autotune"
GROUP_DIAGNOSTICS = "diagnostics"

LOG_LEVELS = ("trace", "debug", "info", "warning", "error")


def _number(text, integer=False):
    """argparse `type`: a finite number >= 0, with a message naming what is wrong."""
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        kind = "a whole number" if integer else "a number"
        raise argparse.ArgumentTypeError("%r is not %s" % (text, kind))
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError("%r is not a finite number" % text)
    if value < 0:
        raise argparse.ArgumentTypeError("%r is negative; use 0 or more" % text)
    return value


def non_negative_float(text):
    return _number(text)


def non_negative_int(text):
    return _number(text, integer=True)


def _plain(value):
    """1.0 -> "1", 1.5 -> "1.5": what a person would type (the engine parses doubles)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _mebibytes_to_bytes(value):
    return str(int(value * 1024 * 1024))


def _absolute_path(value):
    # Ranks may start in another directory (or on another host's mirror of it).
    return os.path.abspath(os.path.expanduser(value))


# flag: the option; env: the variable it sets; group: where --help lists it;
# metavar: None for an on/off switch; type: argparse parser of the value;
# to_env: value -> the variable's text (switches set `switch_value`);
# default: the engine's own default, as --help shows it.
EngineFlag = collections.namedtuple(
    "EngineFlag", "flag env group metavar type to_env switch_value default help choices")


def _flag(flag, env, group, help, default, metavar=None, type=None, to_env=_plain,
          switch_value=None, choices=None):
    return EngineFlag(flag, env, group, metavar, type, to_env, switch_value, default, help, choices)


ENGINE_FLAGS = (
    _flag("--fusion-threshold-mb", env_names.FUSION_THRESHOLD, GROUP_ENGINE,
          "MiB of tensors fused into one collective; 0 turns fusion off",
          default="64 MiB", metavar="MB", type=non_negative_float, to_env=_mebibytes_to_bytes),
    _flag("--cycle-time-ms", env_names.CYCLE_TIME, GROUP_ENGINE,
          "batching window: after the first tensor arrives, wait up to this many ms for more",
          default="0", metavar="MS", type=non_negative_float),
    _flag("--cache-capacity", env_names.CACHE_CAPACITY, GROUP_ENGINE,
          "keep the response cache (one entry per tensor name) at N entries; left unset "
          "it starts at 1024 and doubles, up to 4096, when the job cycles through more "
          "names than it holds (a loop's iterations); 0 turns the cache off",
          default="1024, growing to 4096", metavar="N", type=non_negative_int),
    _flag("--no-shm", env_names.SHM, GROUP_ENGINE,
          "use MPI collectives even when all ranks share one node",
          default="1, shared memory on", switch_value="0"),
    _flag("--timeline-filename", env_names.TIMELINE, GROUP_TIMELINE,
          "rank 0 writes a Chrome trace of every tensor's phases to PATH "
          "(summarize: python -m tf_ring.timeline summarize PATH)",
          default="off", metavar="PATH", type=str, to_env=_absolute_path),
    _flag("--timeline-mark-cycles", env_names.TIMELINE_MARK_CYCLES, GROUP_TIMELINE,
          "mark each engine cycle in the timeline",
          default="0", switch_value="1"),
    _flag("--autotune", env_names.AUTOTUNE, GROUP_TIMELINE,
          "tune fusion threshold and cycle time while training runs",
          default="0", switch_value="1"),
    _flag("--autotune-log-file", env_names.AUTOTUNE_LOG, GROUP_TIMELINE,
          "write each autotune trial (settings and score) to PATH",
          default="none", metavar="PATH", type=str, to_env=_absolute_path),
    _flag("--stall-check-time", env_names.STALL_CHECK_TIME, GROUP_DIAGNOSTICS,
          "warn when some ranks have waited this many seconds for the others; 0 turns it off",
          default="60", metavar="SECONDS", type=non_negative_float),
    _flag("--no-stall-check", env_names.STALL_CHECK_TIME, GROUP_DIAGNOSTICS,
          "turn the stall warning off (same as --stall-check-time 0)",
          default="60", switch_value="0"),
    _flag("--stall-shutdown-time", env_names.STALL_SHUTDOWN_TIME, GROUP_DIAGNOSTICS,
          "turn a stall this many seconds long into an error on every rank; 0 never does",
          default="0, never", metavar="SECONDS", type=non_negative_float),
    _flag("--log-level", env_names.LOG_LEVEL, GROUP_DIAGNOSTICS,
          "engine and Python log level", default="warning", metavar="{%s}" % ",".join(LOG_LEVELS),
          type=str.lower, choices=LOG_LEVELS),
)


def dest(flag):
    return "engine_" + flag.flag.lstrip("-").replace("-", "_")


def help_text(flag):
    return "%s. Sets %s (default: %s)" % (flag.help, flag.env, flag.default)


def add_to_parser(groups):
    """Adds every engine flag to the argparse group named by its `group`."""
    # The two ways of setting the stall check must not contradict each other.
    stall = groups[GROUP_DIAGNOSTICS].add_mutually_exclusive_group()
    for flag in ENGINE_FLAGS:
        group = stall if flag.env == env_names.STALL_CHECK_TIME else groups[flag.group]
        if flag.metavar is None:
            group.add_argument(flag.flag, dest=dest(flag), action="store_true",
                               help=help_text(flag))
        else:
            group.add_argument(flag.flag, dest=dest(flag), metavar=flag.metavar, type=flag.type,
                               choices=flag.choices, default=None, help=help_text(flag))


def environment(namespace):
    """{variable: text} for the engine flags given in `namespace` (argparse's)."""
    env = {}
    for flag in ENGINE_FLAGS:
        value = getattr(namespace, dest(flag))
        if value is None or value is False:
            continue
        env[flag.env] = flag.switch_value if flag.metavar is None else flag.to_env(value)
    return env
