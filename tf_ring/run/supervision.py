"""One mpirun, run and watched to its end: the launcher's signals passed on
to it, the job stopped when its ranks are done but mpirun is not (ULFM), when
a host falls silent or when the ranks do not start in time; then what the
job's end was, said once (tf_ring.run.launcher decides what runs, this
module how one run goes)."""
import collections
import signal
import subprocess
import sys
import threading
import time

from tf_ring.plumbing import process_tree

# Signals that stop the job: the launcher passes them on to mpirun, which
# stops every rank. Dying on them instead would leave mpirun and the ranks
# running with no parent.
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

# After asking mpirun to stop, how long to wait before killing it outright:
# while a daemon is still starting, mpirun ignores SIGTERM.
STOP_GRACE_S = 10.0
# Every rank of a fault-tolerant world ended but mpirun did not: how long to
# let it exit on its own first.
FINISH_GRACE_S = 3.0
# A host declared silent: mpirun, stuck on its daemon, did not end the others'
# ranks in 3 s (measured); their daemons do when mpirun's tree is killed.
SILENT_GRACE_S = 1.0
# A leftover process may still hold mpirun's pipes: how long to read them after it ends.
_PUMP_DRAIN_S = 5.0

# How one mpirun is watched; every field may be None.
# watch: the job's JobWatch (mpirun's output read through it).
# start_timeout: seconds for every rank to start (needs a watch).
# cleanup(hosts, mpirun_pid): stops daemons left on hosts where no rank started.
# finished(): True once the ranks are done though mpirun may not know (under
#   ULFM it has been seen to wait for a lost rank); mpirun is then stopped
#   after FINISH_GRACE_S.
# silence_timeout: a host whose ranks' wrappers have not been heard from for
#   that long (job_watch's beats) is declared lost and mpirun stopped.
Supervision = collections.namedtuple("Supervision",
                                     "watch start_timeout cleanup finished silence_timeout")
Supervision.__new__.__defaults__ = (None,) * len(Supervision._fields)

# How mpirun ended: its exit code, the first signal passed on to it (or
# None), whether it was stopped for ranks that did not start in time.
Ended = collections.namedtuple("Ended", "rc signal start_timed_out")


def run_mpirun(cmd, env, supervision):
    """Runs `cmd` (mpirun) to its end under `supervision`; an Ended. The
    launcher's stop signals go to mpirun meanwhile."""
    received, started = [], []

    def forward(signum, _frame):
        received.append(signum)
        for proc in started:
            proc.send_signal(signum)

    # Installed before mpirun starts, so no signal finds the launcher unguarded.
    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED_SIGNALS}
    try:
        watch = supervision.watch
        pipe = subprocess.PIPE if watch else None
        proc = subprocess.Popen(cmd, env=env, stdout=pipe, stderr=pipe)
        started.append(proc)
        if received:  # arrived while mpirun was starting
            proc.send_signal(received[0])
        pumps = _pump_output(proc, watch) if watch else []
        supervisor = _Supervisor(proc, supervision, received)
        supervisor.run()
        rc = proc.wait()
        _after_mpirun(proc, pumps, supervision, supervisor.stuck_agents)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return Ended(rc, received[0] if received else None, supervisor.start_timed_out)


def _pump_output(proc, watch):
    """Threads reading mpirun's stdout and stderr through the watch (mpirun
    says there which host it lost) on to the launcher's own."""
    pumps = []
    for stream, out in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr)):
        out.flush()
        pumps.append(threading.Thread(target=watch.pump, daemon=True, args=(
            stream.fileno(), getattr(out, "buffer", out)),
            kwargs={"carries_tf_logs": out is sys.stderr}))
        pumps[-1].start()
    return pumps


class _Supervisor(object):
    """Polls a running mpirun and stops it when the job is over or stuck."""

    def __init__(self, proc, supervision, received):
        self.proc, self.sup, self.received = proc, supervision, received
        self.launched = time.time()
        self.stop_asked, self.stop_grace, self.done_at = None, STOP_GRACE_S, None
        self.start_timed_out, self.stuck_agents = False, []

    def run(self):
        while self.proc.poll() is None:
            time.sleep(0.1)
            now = time.time()
            self._stop_when_finished(now)
            self._stop_on_a_silent_host(now)
            self._stop_when_ranks_did_not_start(now)
            if self.received and self.stop_asked is None:
                self.stop_asked = now
            if self.stop_asked is not None and now - self.stop_asked > self.stop_grace:
                process_tree.kill_tree(self.proc.pid)

    def _stop(self, now, grace):
        self.stop_asked, self.stop_grace = now, grace
        self.proc.terminate()

    def _stop_when_finished(self, now):
        if self.sup.finished is None or self.stop_asked is not None or not self.sup.finished():
            return
        self.done_at = self.done_at or now
        if now - self.done_at > FINISH_GRACE_S:
            self._stop(now, FINISH_GRACE_S)  # nothing left to save

    def _stop_on_a_silent_host(self, now):
        watch, timeout = self.sup.watch, self.sup.silence_timeout
        if not (timeout and watch) or self.stop_asked is not None:
            return
        silent = watch.silent_hosts(now, timeout)
        if silent:
            watch.declared_lost.extend(silent)
            print("tfringrun: nothing heard from %s for %g s (--detection-timeout): declaring it "
                  "lost and stopping the job" % (", ".join(silent), timeout), file=sys.stderr)
            self._stop(now, SILENT_GRACE_S)

    def _stop_when_ranks_did_not_start(self, now):
        watch = self.sup.watch
        if (watch and not self.start_timed_out and not watch.all_started()
                and now - self.launched > self.sup.start_timeout):
            self.start_timed_out, self.stop_asked = True, now
            # mpirun may exit on SIGTERM without its hung agents: note them.
            self.stuck_agents = process_tree.descendants(self.proc.pid)
            self.proc.terminate()


def _after_mpirun(proc, pumps, supervision, stuck_agents):
    """What an ended mpirun leaves to do: the heartbeat summary, hung agents
    and daemons stopped, the rest of its output read."""
    watch = supervision.watch
    if supervision.silence_timeout and watch and watch.started:
        # Only for a job whose ranks ran: one mpirun that failed to start
        # (and is started once more) heard no beats to summarise.
        print(watch.heartbeat_summary(supervision.silence_timeout), file=sys.stderr)
    process_tree.kill(stuck_agents)
    if watch and supervision.cleanup and not watch.all_started():
        supervision.cleanup(sorted(watch.hosts_without_start()), proc.pid)
    deadline = time.time() + _PUMP_DRAIN_S
    for pump in pumps:
        pump.join(timeout=max(0.0, deadline - time.time()))
    if watch:
        watch.take_mpirun_reports()


def report(ended, np, supervision, say_failed=True):
    """Says how the job ended and returns the launcher's exit code.
    say_failed=False leaves the generic "job failed" line to the caller (an
    elastic world may end in a restart)."""
    watch = supervision.watch
    if ended.signal is not None:
        print("tfringrun: %s received; the job was stopped on all %d ranks (mpirun exited with %d)"
              % (signal.Signals(ended.signal).name, np, ended.rc), file=sys.stderr)
        return 128 + ended.signal
    if ended.start_timed_out:
        print(start_timeout_message(watch, supervision.start_timeout), file=sys.stderr)
        return 1
    rc, message = (watch.verdict(ended.rc) if watch else (ended.rc, None))
    if message and not say_failed:
        # An elastic world: the driver says whether the job failed or restarts.
        message = "\n".join(l for l in message.splitlines()
                            if not l.startswith("tfringrun: the job failed")) or None
    if message:
        print(message, file=sys.stderr)
    elif rc != 0 and say_failed:
        say_job_failed(rc)
    return rc


def say_job_failed(rc):
    print("tfringrun: job failed with exit code %d (see the 'rank N exited' line above for the "
          "first rank that failed)" % rc, file=sys.stderr)


def start_timeout_message(watch, timeout):
    waiting = watch.hosts_without_start()
    named = watch.mpirun_named_hosts()
    hosts = ", ".join("%s (ranks %s)" % (host, ", ".join(map(str, ranks)))
                      for host, ranks in sorted(waiting.items()))
    text = ("tfringrun: the job was stopped: %d of %d ranks had not started %g s after launch "
            "(--start-timeout): %s. mpirun starts the ranks only once its daemon runs on every "
            "host, so one of these hosts is unreachable or asks for a password; check `ssh HOST` "
            "works without one, the --rsh-agent and --network-interface"
            % (watch.np - len(watch.started), watch.np, timeout, hosts))
    if named:
        text += ". mpirun reported trouble with: %s" % ", ".join(named)
    return text
