"""The host-local mirror of the last commit, for the elastic launcher's
coordinated restart: the new world's processes find the committed state in
tmpfs (TF_RING_ELASTIC_STATE_DIR, e.g. /dev/shm/tf_ring-elastic-<job>)
instead of a user checkpoint.

commit() hands over a snapshot it already copied; a background thread
pickles it to a temp file and renames it into place, so commit does not wait
for the write and a crash mid-write never leaves a half file (the previous
mirror stays). Only the newest pending snapshot is written: if commits come
faster than writes, the older ones are skipped. One writer per host is
enough (every rank holds the same committed state)."""
import os
import pickle
import threading

MIRROR_FILE = "commit.pkl"


class MirrorWriter:
    def __init__(self, directory):
        self._path = os.path.join(directory, MIRROR_FILE)
        self._pending, self._cond, self._closed = None, threading.Condition(), False
        self._written = 0  # commits written, for flush()
        self._submitted = 0
        self._thread = threading.Thread(target=self._loop, daemon=True, name="tf_ring-mirror")
        self._thread.start()

    def submit(self, snapshot):
        """Queues `snapshot` (already a copy; not changed afterwards)."""
        with self._cond:
            self._submitted += 1
            self._pending = (self._submitted, snapshot)
            self._cond.notify_all()

    def flush(self, timeout=None):
        """Waits until the newest submitted snapshot is on disk; True if so."""
        with self._cond:
            return self._cond.wait_for(lambda: self._written >= self._submitted, timeout)

    def close(self):
        self.flush()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()

    def _loop(self):
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending is not None or self._closed)
                if self._pending is None:
                    return
                number, snapshot = self._pending
                self._pending = None
            temp = "%s.%d.tmp" % (self._path, os.getpid())
            with open(temp, "wb") as f:
                pickle.dump(snapshot, f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(temp, self._path)  # atomic: readers see the old or the new file
            with self._cond:
                self._written = max(self._written, number)
                self._cond.notify_all()


def load_mirror(directory):
    """The mirrored snapshot in `directory`, or None when there is none."""
    try:
        with open(os.path.join(directory, MIRROR_FILE), "rb") as f:
            return pickle.load(f)
    except FileNotFoundError:
        return None
