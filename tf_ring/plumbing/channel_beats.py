"""Heartbeats on the job's sealed channels (tf_ring.plumbing.sealed_frames).

TCP keepalive cannot tell a frozen peer (SIGSTOP, a hung host's process)
from a live one: the kernel answers for it. So every sealed connection
beats at the protocol level: one thread per process (never the one doing a
caller's work) sends each of its open channels a sealed heartbeat frame
when that channel has sent nothing for a third of its timeout, and each
channel's reader drops the connection once it has heard nothing at all
(no frame, no heartbeat, no byte) for its timeout. A peer that is quiet
but alive (a rank inside a long function, an agent whose command prints
nothing, rank 0 between commits) still beats, and is never cut.

The timeout is TF_RING_CHANNEL_TIMEOUT_S seconds (default 30), read when a
channel is sealed. A heartbeat carries its sender's interval, so a side
set to a shorter timeout than its peer's waits for three of the peer's
intervals before giving up: a job whose processes disagree is slower to
notice a frozen peer, never quicker to cut a live one. Standard library only."""
import os
import select
import threading
import time

from tf_ring.plumbing import env_names

TIMEOUT_ENV = env_names.CHANNEL_TIMEOUT
DEFAULT_TIMEOUT_S = 30.0
MIN_TIMEOUT_S = 0.3  # beats every 0.1 s then: enough for tests, and no busier
MAX_TIMEOUT_S = 86400.0


def timeout_s(environ=None):
    """The channel timeout this process uses (ValueError naming the variable
    when it is not a number of seconds in range)."""
    text = (os.environ if environ is None else environ).get(TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not MIN_TIMEOUT_S <= value <= MAX_TIMEOUT_S:  # nan fails this too
        raise ValueError("%s=%r: give the seconds a sealed channel may hear nothing from its peer "
                         "before it is dropped, between %g and %g (default %g)"
                         % (TIMEOUT_ENV, text, MIN_TIMEOUT_S, MAX_TIMEOUT_S, DEFAULT_TIMEOUT_S))
    return value


def writable(sock):
    """True when a heartbeat (a few dozen bytes) can be sent without waiting."""
    poller = select.poll()
    try:
        poller.register(sock, select.POLLOUT)
    except (ValueError, OSError):  # closed meanwhile
        return False
    return any(event & select.POLLOUT for _, event in poller.poll(0))


class _Beater:
    """The process's one heartbeat thread, started with the first channel."""

    def __init__(self):
        self._channels = set()
        self._changed = threading.Condition()
        self._thread = None

    def add(self, channel):
        with self._changed:
            self._channels.add(channel)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="tf_ring-channel-beats")
                self._thread.start()
            self._changed.notify()

    def remove(self, channel):
        with self._changed:
            self._channels.discard(channel)

    def _run(self):
        while True:
            with self._changed:
                now = time.monotonic()
                due = [c for c in self._channels if c.beat_due() <= now]
                if not due:
                    soonest = min((c.beat_due() for c in self._channels), default=now + 60.0)
                    self._changed.wait(max(soonest - now, 0.005))
                    continue
            for channel in due:  # outside the lock: a beat never holds up add()/remove()
                channel.beat()


    def forget_all(self):
        """In a forked child: the parent's channels are not this process's to beat."""
        self._channels, self._changed, self._thread = set(), threading.Condition(), None


BEATER = _Beater()
os.register_at_fork(after_in_child=BEATER.forget_all)
