"""The `run` decorator: call, and on a lost rank or a host change, reset and
call again; plus the reset hook and the reset limit.

The reset re-initializes the engine (shutdown() + init()); in fault-tolerant
mode (MPI ULFM, tf_ring/elastic/in_process.py) it first shrinks the engine's
communicator to the ranks left, so survivors keep their processes. See
docs/elastic.md.
"""
import functools
import os

from tf_ring.runtime import basics
from tf_ring.plumbing import env_names
from tf_ring.elastic import in_process, restart
from tf_ring.elastic.errors import HorovodInternalError, HostsUpdatedInterrupt, ResetLimitError



def _reinit_engine():
    if in_process.fault_tolerant():
        in_process.shrink_and_restart()  # a rank may be gone: continue on the rest
        return
    basics.shutdown()
    basics.init()


_reset_hook = _reinit_engine
_reset_limit = None  # None: TF_RING_ELASTIC_RESET_LIMIT decides
_reset_count = 0


def set_reset_hook(hook):
    """Installs `hook()`, what a reset does between the failure and the next
    call (every rank calls it together). None restores the default, which
    shuts the engine down and initializes it again."""
    global _reset_hook
    if hook is not None and not callable(hook):
        raise TypeError("set_reset_hook() takes a function or None, got %r" % type(hook).__name__)
    _reset_hook = hook if hook is not None else _reinit_engine


def reset():
    """Resets the engine with the installed hook (what `run` does)."""
    _reset_hook()


def set_reset_limit(limit):
    """At most `limit` resets in this process (the launcher's --reset-limit
    will set it); None: TF_RING_ELASTIC_RESET_LIMIT, or no limit without it."""
    global _reset_limit
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        raise ValueError("set_reset_limit() takes a count >= 0 or None, got %r" % (limit,))
    _reset_limit = limit


def reset_limit():
    """The limit in force, or None for none."""
    if _reset_limit is not None:
        return _reset_limit
    value = os.environ.get(env_names.ELASTIC_RESET_LIMIT, "").strip()
    if not value:
        return None
    try:
        limit = int(value)
    except ValueError:
        limit = -1
    if limit < 0:
        raise ValueError("%s=%r: expected a count >= 0" % (env_names.ELASTIC_RESET_LIMIT, value))
    return limit


def reset_count():
    """How many resets `run` has made in this process."""
    return _reset_count


def _count_reset(cause):
    global _reset_count
    limit = reset_limit()
    if limit is not None and _reset_count >= limit:
        raise ResetLimitError(
            "tf_ring.elastic.run: the job needs reset number %d (after %s: %s), but the reset "
            "limit is %d (%s or set_reset_limit()); stopping instead. Raise the limit, or find "
            "why ranks keep failing." % (_reset_count + 1, type(cause).__name__, cause, limit,
                                         env_names.ELASTIC_RESET_LIMIT)) from cause
    _reset_count += 1


def run(func):
    """Decorator for a training function `func(state, ...)`.

    Calls state.sync(), then func. On HorovodInternalError (a lost rank;
    in fault-tolerant mode also the UnavailableError a collective raises
    when a rank is lost) it
    restores the last commit, resets, and calls again (after another sync);
    on HostsUpdatedInterrupt it resets without restoring (the state was just
    committed) and syncs again unless the interrupt says skip_sync. Every
    other exception propagates unchanged. Every rank takes the same path:
    both exceptions are raised on every rank together.
    """
    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                result = func(state, *args, **kwargs)
                restart.finish()  # done: no host keeps the job's state after it
                return result
            except HorovodInternalError as error:
                state.restore()
                skip_sync = False
                cause = error
            except HostsUpdatedInterrupt as interrupt:
                if restart.under_driver():
                    restart.exit_for_relaunch()  # the driver relaunches at the new size
                skip_sync = interrupt.skip_sync
                cause = interrupt
            except Exception as error:  # noqa: BLE001 - only a lost rank is ours
                if not in_process.is_lost_rank_error(error):
                    raise
                state.restore()
                skip_sync = False
                cause = HorovodInternalError(str(error))
            _reset_until_done(state, cause)
    return wrapper


def _reset_until_done(state, cause):
    """Resets and runs the state's reset callbacks; a rank lost meanwhile
    (the hook's collectives, or a callback's, meet it) makes every survivor
    reset again rather than end the job. Each try counts against the limit."""
    while True:
        _count_reset(cause)
        try:
            _reset_hook()
            state.on_reset()
            return
        except HorovodInternalError as error:
            cause = error
        except Exception as error:  # noqa: BLE001 - only a lost rank is ours
            if not in_process.is_lost_rank_error(error):
                raise
            cause = HorovodInternalError(str(error))
