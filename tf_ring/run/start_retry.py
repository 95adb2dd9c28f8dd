"""Starting mpirun once more when its start failed before any rank ran.

Two start-up failures of Open MPI's runtime happen before any rank runs,
so a second start is safe:

- mpirun's own PMIx server did not start ("listener thread failed to
  start"), for any job;
- a daemon on one host exited during its own start-up (`Daemon exit status:
  213`: the same PMIx failure, its message lost because the daemon had
  detached), seen in CI when an elastic world started right after the last
  one ended. Judged as is, that host would look lost and be blacklisted;
  with two hosts left the job would end. Only elastic worlds retry this
  one: there a host blamed wrongly costs the job a host, while a plain job
  fails at once naming the host, and a real dead host fails the second
  start too.

The cause seen in CI was stale session directories at the daemon's pid,
which session_dirs now rules out for tfringrun's jobs; the retry stays for
any other transient cause.
"""
import sys
import time

PMIX_START_FAILURE = b"PMIx server's listener thread failed to start"
DAEMON_START_FAILURE = b"A daemon failed to report back"
_PAUSE_S = 1.0  # lets the failed mpirun's daemons and session directories go


def mpirun_failed_to_start_itself(watch):
    return watch is not None and not watch.started and watch.mpirun_said(PMIX_START_FAILURE)


def daemon_failed_to_start(watch):
    """A daemon's start failed and no rank anywhere had started."""
    return watch is not None and not watch.started and watch.mpirun_said(DAEMON_START_FAILURE)


def why_nothing_started(watch, daemons_too):
    """The transient failure that stopped this start before any rank ran,
    in words, or None when there was none (or it is not retried here)."""
    if mpirun_failed_to_start_itself(watch):
        return "mpirun's own PMIx server failed to start before any rank ran " \
               "(a transient Open MPI start-up failure)"
    if daemons_too and daemon_failed_to_start(watch):
        hosts = ", ".join(watch.mpirun_named_hosts()) or "a host"
        return "mpirun's daemon on %s exited while starting, before any rank ran; " \
               "one more start tells a transient failure from a dead host" % hosts
    return None


def once_more_if_nothing_started(start, what, daemons_too=False):
    """start(may_retry) -> (result, watch, mpirun's code); called once more
    when that start failed transiently before any rank ran. Returns the
    result."""
    result, watch, rc = start(True)
    why = why_nothing_started(watch, daemons_too) if rc != 0 else None
    if why:
        print("tfringrun: %s; starting %s once more" % (why, what), file=sys.stderr)
        time.sleep(_PAUSE_S)
        result, watch, rc = start(False)
    return result
