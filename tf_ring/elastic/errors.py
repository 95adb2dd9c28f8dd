"""The exceptions elastic training speaks, with Horovod's names and classes
(both RuntimeError subclasses, so `except RuntimeError` code keeps working)."""
from tf_ring.plumbing.host_updates import HostUpdateResult  # noqa: F401 (public here)


class HorovodInternalError(RuntimeError):
    """A collective failed because a rank was lost. `tf_ring.elastic.run`
    restores the last commit, resets and calls the training function again.

    Every rank must raise it together (as a failed collective does), since the
    recovery that follows is collective too."""


class HostsUpdatedInterrupt(RuntimeError):
    """Rank 0 learned that hosts were added or removed (raised by
    `State.commit()` / `check_host_updates()` on every rank together).
    `run` resets without restoring: the state was just committed.

    skip_sync: True when hosts were only removed, so every remaining rank
    already holds the same state and the sync after the reset can be skipped.
    """

    def __init__(self, skip_sync=False):
        super().__init__("hosts were %s" % ("removed" if skip_sync else "added or changed"))
        self.skip_sync = skip_sync


class ResetLimitError(RuntimeError):
    """The job reset more often than its reset limit allows (see
    `tf_ring.elastic.set_reset_limit`); the cause is chained as __cause__."""
