"""Host-change notices from the elastic driver to rank 0.

The driver learns of added hosts from its discovery script and keeps a
notice for the running world in its control service
(tf_ring.elastic_driver.control_service); rank 0 asks for the new ones at each commit
over the job's authenticated control channel (tf_ring.elastic.control_client),
wherever rank 0 runs. Rank 0 then broadcasts what it found, so every rank
raises HostsUpdatedInterrupt at the same commit."""
import time

from tf_ring.elastic import control_client

# Commits can come every few milliseconds; a notice is seen within this much
# later without a round trip to the launcher at every one of them.
MIN_POLL_INTERVAL_S = 0.1


class ServiceNoticeSource:
    """A host-update source (see hosts.set_host_update_source) that returns
    the notices the driver added since its last call."""

    def __init__(self, client, clock=time.monotonic):
        self._client, self._clock, self._last = client, clock, None

    def __call__(self):
        now = self._clock()
        if self._last is not None and now - self._last < MIN_POLL_INTERVAL_S:
            return []
        self._last = now
        return self._client.notices()


def source_from_environment(environ=None):
    """The service source when this process was started by the elastic
    driver, else None."""
    client = control_client.from_environment(environ)
    return ServiceNoticeSource(client) if client is not None else None
