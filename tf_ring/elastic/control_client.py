"""Rank 0's end of the control channel to tfringrun's elastic driver
(tf_ring.plumbing.control_wire; the driver's end is tf_ring.elastic_driver.control_service).

One connection, opened on first use to the first launcher address that
answers and proves the job's secret, reopened once if it breaks. A frame
that fails its check, or a reply that is not what the protocol says, drops
the connection like a broken one: nothing of it reaches the commit. The channel
only informs: when the launcher cannot be reached the rank says so once and
trains on (no notices; the launcher still judges the job from its ranks'
exits)."""
import os
import sys
import threading
import time

from tf_ring.plumbing import control_wire
from tf_ring.plumbing.control_wire import ChannelError

CONNECT_TIMEOUT_S = 3.0
# After the launcher could not be reached, commits do not wait on it again
# for this long (a dropped SYN costs CONNECT_TIMEOUT_S per address).
RETRY_AFTER_S = 30.0
_client = None
_client_checked = False


class ControlClient:
    def __init__(self, endpoint, secret):
        """`endpoint`: the control service's (TF_RING_CONTROL_TO)."""
        self._endpoint, self._secret = endpoint, secret
        self._channel = None
        self._next_notice = 0
        self._lock = threading.Lock()  # the mirror thread reports commits beside the main thread
        self._warned = False
        self._quiet_until = 0.0  # no new connection attempt before this (time.monotonic)

    def notices(self):
        """The (timestamp, result) notices of this world not returned before."""
        reply = self._call({"op": "notices", "since": self._next_notice})
        if reply is None:
            return []
        found, items = [], reply.get("notices")
        for item in items if isinstance(items, list) else []:
            if (isinstance(item, list) and len(item) == 2 and isinstance(item[0], (int, float))
                    and isinstance(item[1], int) and abs(item[0]) < 1e300):
                found.append((float(item[0]), item[1]))
        if isinstance(reply.get("next"), int):
            self._next_notice = reply["next"]
        return found

    def report_world_size(self, size, members=None):
        """`members`: the survivors' ranks in the world tfringrun started."""
        request = {"op": "world_size", "size": int(size)}
        if members is not None:
            request["members"] = [int(r) for r in members]
        self._call(request)

    def report_commit(self, number):
        self._call({"op": "committed", "commit": int(number)})

    def close(self):
        with self._lock:
            if self._channel is not None:
                self._channel.close()
                self._channel = None

    def _call(self, request):
        with self._lock:
            if self._channel is None and time.monotonic() < self._quiet_until:
                return None
            for attempt in range(2):
                try:
                    if self._channel is None:
                        self._channel = self._connect()
                    self._channel.send(request)
                    reply = self._channel.receive()
                    if "error" in reply:
                        raise ChannelError(str(reply["error"]))
                    return reply
                except (OSError, ChannelError) as e:
                    if self._channel is not None:
                        self._channel.close()
                        self._channel = None
                    problem = e
            self._quiet_until = time.monotonic() + RETRY_AFTER_S
            if not self._warned:
                self._warned = True
                print("tf_ring: cannot reach tfringrun's control channel (%s): host changes are "
                      "not seen from here (trying again every %g s)" % (problem, RETRY_AFTER_S), file=sys.stderr, flush=True)
            return None

    def _connect(self):
        return control_wire.connect(self._endpoint, self._secret, CONNECT_TIMEOUT_S)


def from_environment(environ=None):
    """The process's client when tfringrun's elastic driver started it, else None."""
    global _client, _client_checked
    if environ is not None:
        return _make(environ)
    if not _client_checked:
        _client, _client_checked = _make(os.environ), True
    return _client


def _make(env):
    value, secret = env.get(control_wire.ADDRESS_ENV), env.get(control_wire.SECRET_ENV)
    return ControlClient(value, secret) if value and secret else None
