"""How a job really ended, rank by rank, without trusting mpirun's exit code.

mpirun exits 0 when it loses a remote daemon (the host died), and it never
says which rank ran where. So each rank runs under a small sh wrapper that
reports on stderr when it starts (and on which host), and how it ended:
"exit" with the program's code, or "stopped" when the job's teardown
signalled it. The launcher reads mpirun's stderr, takes these status lines
out, passes everything else through unchanged, and afterwards counts: every
rank must have exited 0. Ranks that never reported an end ran on a host that
died or whose daemon never started; the launcher names it.
"""
import os
import re
import select
import shlex
import threading
import time

from tf_ring.run import tf_noise

STATUS = "tfringrun-status"
_BEATS_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "beats.py")
# mpirun's own words (on stdout or stderr) for a daemon that failed to
# start or report back, and for one it lost.
_MPIRUN_HOST_PATTERNS = (re.compile(rb"Remote host:\s+(\S+)"),
                         re.compile(rb"Remote daemon:\s+\S+ on node\s+(\S+)"))
# What Open MPI's MPI_ERRORS_ARE_FATAL handler prints for the rank whose MPI
# call failed ("*** reported by process [job,rank]"); MPI_Abort and Python
# exceptions print other words.
_MPI_ERROR_RANK = re.compile(rb"\*\*\* reported by process \[\d+,(\d+)\]")
# PRRTE's own word for a rank process that died of a signal (wrapped over
# lines): "prterun noticed that process rank 2 with PID 77 on node n3 exited
# on\nsignal 9 (Killed)." Evidence of which rank died where, when its
# wrapper was killed with it and could not report.
_SIGNALLED_RANK = re.compile(rb"process\s+rank\s+(\d+)\s+with\s+PID\s+\d+\s+on\s+node\s+(\S+)"
                             rb"\s+exited\s+on\s+signal\s+(\d+)")
_KEEP_TAIL = 256 * 1024  # of each stream's other output, for the patterns above


def rank_wrapper(token, die_like_the_rank=False, beat_s=None, udp_beats_python=None):
    """The sh script every rank runs under ("$@" is the user's command).

    beat_s: a background loop reports "beat" every beat_s seconds while the
    wrapper lives, so the launcher hears from every host even while the
    ranks are quiet or blocked; a host whose beats stop (link down, machine
    frozen) is one no socket error may report for many minutes. The loop
    ends with the wrapper: killed when the rank ends, and checking each time
    that the wrapper is alive (and no zombie: a TERM from the teardown that
    lands while the loop is being forked may leave it running); its sleep
    holds none of the job's pipes and goes with it.

    udp_beats_python: with beat_s, this Python also runs tf_ring/run/beats.py
    beside the rank, which sends signed beats over UDP every 0.5 s (they
    do not wait behind the job's traffic in the daemon's TCP connection).

    die_like_the_rank: a rank killed by a signal takes its shell down with
    SIGKILL after reporting, instead of exiting with 128+signal. Under ULFM
    (--recovery in-process) mpirun ends the whole job when a rank exits with
    a non-zero code, but lets the survivors go on when one dies of a signal.

    The shell's own stderr goes to /dev/null (dash would print "Terminated"
    for every rank the teardown stops); the program and the status lines
    use the real stderr, kept on fd 3. The program runs in an exec'd
    subshell so its redirection is not applied to the waiting shell, and
    signals trapped here are reset to default for it.
    """
    status = 'echo "%s %s' % (STATUS, token)
    return ('exec 3>&2 2>/dev/null; stopped=; trap "stopped=1" TERM INT HUP; '
            'r=${OMPI_COMM_WORLD_RANK:-?}; '
            + status + ' start $r $(uname -n)" >&3; '
            + (('(trap \'kill $s; exit 0\' TERM; s=; '
                'while kill -0 $$ && ! grep -q "^State:.*Z" /proc/$$/status; do '
                'sleep %g </dev/null >/dev/null 3>&- & s=$!; wait $s; ' % beat_s
                + status + ' beat $r" >&3 || exit 0; done) & b=$!; ') if beat_s else '')
            + (('%s %s $r $$ </dev/null >/dev/null 2>&1 3>&- & u=$!; '
                % (shlex.quote(udp_beats_python), shlex.quote(_BEATS_SCRIPT)))
               if beat_s and udp_beats_python else '')
            + '(exec 2>&3 3>&-; exec "$@"); rc=$?; '
            + ('kill $b; ' if beat_s else '') + ('kill $u; ' if beat_s and udp_beats_python else '') +
            'if [ -n "$stopped" ]; then ' + status + ' stopped $r $rc" >&3; exit $rc; fi; '
            'if [ $rc -ne 0 ]; then echo "tfringrun: rank $r exited with code $rc" >&3; fi; '
            + status + ' exit $r $rc" >&3; '
            + ('if [ $rc -ge 128 ]; then kill -KILL $$; fi; ' if die_like_the_rank else '')
            + 'exit $rc')


class JobWatch(object):
    """Collects the ranks' status lines from mpirun's stderr.

    planned: {rank: host} from the launcher's layout, used for ranks that
    never said where they run.
    """

    def __init__(self, token, np, planned=None, quiet_tf=False):
        self.np = np
        self._quiet_tf = quiet_tf  # drop TensorFlow's start-up lines (tf_noise)
        self.planned = dict(planned or {})
        self.started = {}  # rank -> host it reported
        self.ended = {}  # rank -> ("exit" or "stopped", code)
        self.end_order = []  # ranks in the order their ends were reported
        self.heard = {}  # rank -> when its last status line (start or beat) or UDP beat came
        self._last_beat = {}  # (path, rank) -> when that path last brought a beat
        self.longest_gap = {"output": 0.0, "udp": 0.0}  # of any running rank, per path
        self._writing = 0  # pump threads inside a write of the launcher's output
        self.declared_lost = []  # hosts the launcher gave up on for their silence
        self._status = re.compile(rb"%s %s (start|exit|stopped|beat) (\S+) ?(\S*)\r?\n"
                                  % (STATUS.encode(), token.encode()))
        self._tails = {}  # out stream -> the last of what passed through it
        self._line_start = {}  # out stream -> whether what passed through it ended a line
        self._lock = threading.Lock()  # stdout and stderr are pumped by two threads

    # -- reading ---------------------------------------------------------------
    def pump(self, fd, out, idle_flush=0.3, carries_tf_logs=True):
        """Reads `fd` (mpirun's stdout or stderr) until EOF, writing all but
        the status lines to `out` (a binary file), and, with quiet_tf on a
        stream that carries_tf_logs (stderr), all but TensorFlow's known
        start-up lines. A trailing piece that may be the start of a status
        line or of such a line is held back until the rest arrives or the
        stream has been idle `idle_flush` s."""
        quiet = self._quiet_tf and carries_tf_logs
        pending = b""
        while True:
            wait = idle_flush if pending else None
            ready, _, _ = select.select([fd], [], [], wait)
            if not ready:  # idle: what is held back was no status line
                self._emit(pending, out)
                pending = b""
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                self._emit(pending, out)
                return
            pending = self._consume(pending + chunk, out, quiet)

    def _consume(self, data, out, quiet=False):
        """Takes out complete status lines, writes the rest, returns what to hold."""
        kept, start = [], 0
        for match in self._status.finditer(data):
            kept.append(data[start:match.start()])
            start = match.end()
            self._record(*(g.decode(errors="replace") for g in match.groups()))
        rest = data[start:]
        hold = self._possible_status_start(rest)
        shown, held = b"".join(kept) + rest[:len(rest) - hold], b""
        if quiet:
            shown, held = tf_noise.quiet(shown, at_line_start=self._line_start.get(id(out), True))
        self._emit(shown, out)
        return held + rest[len(rest) - hold:]

    @staticmethod
    def _possible_status_start(data):
        """Length of the tail of `data` that could begin a status line."""
        marker = STATUS.encode()
        found = data.rfind(marker)
        if found >= 0 and b"\n" not in data[found:]:
            return len(data) - found
        for size in range(min(len(marker) - 1, len(data)), 0, -1):
            if data.endswith(marker[:size]):
                return size
        return 0

    def _emit(self, data, out):
        if data:
            # While the launcher's own output is blocked (its reader is slow)
            # this thread reads nothing, beats included: that time says
            # nothing about the hosts, so their silence clocks skip it.
            with self._lock:
                self._writing += 1
            began = time.time()
            try:
                out.write(data)
                out.flush()
            finally:
                with self._lock:
                    self._writing -= 1
                    now = time.time()
                    if now - began > 0.2:
                        for rank in self.heard:
                            self.heard[rank] = min(now, self.heard[rank] + now - began)
            with self._lock:
                self._line_start[id(out)] = data.endswith(b"\n")
                tail = self._tails.setdefault(id(out), bytearray())
                tail += data
                del tail[:-_KEEP_TAIL]

    def _record(self, kind, rank, value):
        if not rank.isdigit():
            return
        with self._lock:
            self._record_locked(kind, rank, value)

    def heard_over_udp(self, rank):
        """A valid UDP beat (tf_ring.run.beats) from `rank`."""
        with self._lock:
            if rank in self.started and rank not in self.ended:
                self._beat_locked("udp", rank)

    def _beat_locked(self, path, rank):
        now = time.time()
        self.heard[rank] = now
        last = self._last_beat.get((path, rank))
        if last is not None:
            self.longest_gap[path] = max(self.longest_gap[path], now - last)
        self._last_beat[(path, rank)] = now

    def _record_locked(self, kind, rank, value):
        # Every status line came the way the beats come: an end line closes
        # the silence since the rank's last beat too.
        self._beat_locked("output", int(rank))
        if kind == "start":
            self.started[int(rank)] = value
        elif kind != "beat":
            self.ended[int(rank)] = (kind, int(value) if value.isdigit() else -1)
            self.end_order.append(int(rank))

    # -- judging ---------------------------------------------------------------
    def all_started(self):
        return len(self.started) >= self.np

    def host_of(self, rank):
        return self.started.get(rank) or self.planned.get(rank, "?")

    def hosts_without_start(self):
        """{host: [ranks]} planned there that never reported starting."""
        return _by_host((r, self.planned.get(r, "?")) for r in range(self.np)
                        if r not in self.started)

    def heartbeat_summary(self, timeout):
        """The launcher's closing line on the two beat paths' longest silences."""
        return ("tfringrun: heartbeats: longest silence of a running rank %.1f s on mpirun's "
                "output, %.1f s over UDP (--detection-timeout %g)"
                % (self.longest_gap["output"], self.longest_gap["udp"], timeout))

    def silent_hosts(self, now, timeout):
        """Hosts none of whose running ranks (started, not ended) has been
        heard from for more than `timeout` seconds."""
        ages = {}
        with self._lock:
            if self._writing:
                return []  # a write may be blocked: nothing can be heard meanwhile
            for rank, host in self.started.items():
                if rank not in self.ended:
                    ages.setdefault(host, []).append(now - self.heard.get(rank, now))
        return sorted(h for h, a in ages.items() if min(a) > timeout)

    def lost_hosts_named(self):
        """Hosts declared lost: by the launcher for their silence, then by
        mpirun's own messages."""
        return _ordered(self.declared_lost + self.mpirun_named_hosts())

    def mpirun_said(self, text):
        """Whether `text` (bytes) passed through mpirun's output."""
        with self._lock:
            return any(text in bytes(tail) for tail in self._tails.values())

    def mpirun_named_hosts(self):
        """Hosts mpirun's own messages said it lost or could not start, in order."""
        names = []
        with self._lock:
            texts = [bytes(tail) for tail in self._tails.values()]
        for pattern, text in ((p, t) for p in _MPIRUN_HOST_PATTERNS for t in texts):
            for match in pattern.finditer(text):
                name = match.group(1).decode(errors="replace")
                if name not in names:
                    names.append(name)
        return names

    def mpi_error_ranks(self):
        """Ranks whose MPI library aborted on an error (a closed socket to a
        dead peer, for one), from Open MPI's own message."""
        with self._lock:
            texts = [bytes(tail) for tail in self._tails.values()]
        return sorted({int(m.group(1)) for t in texts for m in _MPI_ERROR_RANK.finditer(t)})

    def signalled_ranks(self):
        """{rank: (host, signal)} for the ranks mpirun said died of a signal."""
        with self._lock:
            texts = [bytes(tail) for tail in self._tails.values()]
        return {int(m.group(1)): (m.group(2).decode(errors="replace"), int(m.group(3)))
                for t in texts for m in _SIGNALLED_RANK.finditer(t)}

    def take_mpirun_reports(self):
        """Counts a rank mpirun saw die of a signal as one that reported it
        (exit 128 + signal) when its wrapper died with it and said nothing:
        then that rank's host is the one to blame, not every silent rank's."""
        signalled = self.signalled_ranks()
        with self._lock:
            for rank, (host, number) in sorted(signalled.items()):
                if rank < self.np and rank not in self.ended:
                    self.ended[rank] = ("exit", 128 + number)
                    self.end_order.append(rank)
                    self.started.setdefault(rank, host)

    def lost_ranks(self):
        """Ranks that never reported an end: their shell was killed outright,
        which the job's own teardown never does (it signals, and they report
        "stopped")."""
        return [r for r in range(self.np) if r not in self.ended]

    def failed_ranks(self):
        return [r for r, (kind, code) in sorted(self.ended.items()) if kind == "exit" and code != 0]

    def verdict(self, mpirun_rc):
        """(exit code, message or None) for the whole job."""
        if self.failed_ranks():
            return mpirun_rc or 1, None  # the wrapper already named the first failure
        lost = self.lost_ranks()
        if not lost:
            clean = sum(1 for kind, code in self.ended.values() if kind == "exit" and code == 0)
            if clean == self.np or mpirun_rc != 0:
                return mpirun_rc, None
            return 1, ("tfringrun: mpirun stopped the job but no rank failed and no host was "
                       "lost (%d of %d ranks finished cleanly)" % (clean, self.np))
        return mpirun_rc or 1, self._lost_message(lost)

    def _lost_message(self, lost):
        # mpirun names the host whose daemon it lost when it says anything;
        # otherwise the lost ranks' own hosts are the ones that went away.
        named = self.lost_hosts_named()
        hosts = _ordered(named or [self.host_of(r) for r in lost])
        lines = []
        if not named and len(hosts) > 1:
            lines.append("tfringrun: ranks %s on %s ended without reporting an exit code: one of "
                         "these hosts died or stopped answering (mpirun did not say which)"
                         % (_ranks(lost), ", ".join(hosts)))
            hosts = []
        for host in hosts:
            ranks = [r for r in range(self.np) if _same_host(self.host_of(r), host)
                     or _same_host(self.planned.get(r, "?"), host)]
            where = "ranks %s" % _ranks(ranks) if ranks else "no known ranks"
            if not any(r in self.started for r in ranks):
                lines.append("tfringrun: host %s (%s): mpirun could not start or reach its daemon "
                             "there, so no rank started; check that `ssh %s` works without a "
                             "password, the --rsh-agent and --network-interface"
                             % (host, where, host))
            else:
                lines.append("tfringrun: host %s (%s) was lost: its processes ended without "
                             "reporting an exit code, so the host died or stopped answering"
                             % (host, where))
        clean = sum(1 for kind, code in self.ended.values() if kind == "exit" and code == 0)
        lines.append("tfringrun: the job failed: %d of %d ranks finished cleanly, the rest were "
                     "stopped" % (clean, self.np))
        return "\n".join(lines)


def _by_host(pairs):
    grouped = {}
    for rank, host in pairs:
        grouped.setdefault(host, []).append(rank)
    return grouped


def _ordered(names):
    seen = []
    for name in names:
        if not any(_same_host(name, s) for s in seen):
            seen.append(name)
    return seen


def _same_host(a, b):
    """"node1" and "node1.cluster.local" are one host."""
    return a == b or a.split(".")[0] == b.split(".")[0]


def _ranks(ranks):
    return ", ".join(str(r) for r in ranks)
