"""A service's count of the connections it refused or dropped, in all and
by reason, each logged (at most a few lines a minute: a flood must not
flood the log too)."""
import collections
import logging
import threading
import time

LOGGER = logging.getLogger("tf_ring.channels")
_FIRST_LOGGED = 5  # then one line per LOG_EVERY_S with the count
LOG_EVERY_S = 10.0


class Refusals:
    def __init__(self, service):
        self.service, self.count = service, 0
        self.reasons = collections.Counter()  # reason (channel_errors.ChannelError.reason) -> count
        self._lock = threading.Lock()
        self._logged_at = None

    def add(self, peer, why, reason="protocol"):
        """Counts a refused or dropped connection from `peer` ((host, port) or None)."""
        with self._lock:
            self.count += 1
            self.reasons[reason] += 1
            now = time.monotonic()
            if self.count > _FIRST_LOGGED and self._logged_at is not None \
                    and now - self._logged_at < LOG_EVERY_S:
                return
            self._logged_at = now
            count = self.count
        LOGGER.warning("tf_ring %s service: dropped a connection from %s: %s "
                       "(%d refused or dropped so far)",
                       self.service, "%s:%s" % tuple(peer[:2]) if peer else "an unknown peer",
                       why, count)
