"""The host-local mirror of the last commit, for the elastic launcher's
coordinated restart: the new world's processes find the committed state in
their own host's tmpfs (TF_RING_ELASTIC_STATE_DIR, e.g.
/dev/shm/tf_ring-elastic-<job>, made private by the job on each host)
instead of a user checkpoint.

commit() hands over a snapshot it already copied; a background thread
pickles it to a temp file and renames it into place, so commit does not wait
for the write and a crash mid-write never leaves a half file (the previous
mirror stays). Only the newest pending snapshot is written: if commits come
faster than writes, the older ones are skipped. One writer per host is
enough (every rank holds the same committed state).

The file is signed with the job's secret (HMAC-SHA256 over the pickle) and
read back only when the signature holds, so a file planted by someone
without the secret is refused before anything is unpickled."""
import hashlib
import hmac
import os
import pickle
import sys
import threading

from tf_ring.plumbing.private_dirs import create_private_file, make_private_dir, open_private_file

MIRROR_FILE = "commit.pkl"
_MAGIC = b"tf_ring-mirror-1\n"
_MAC_BYTES = hashlib.sha256().digest_size


class MirrorRefused(RuntimeError):
    """A mirror file whose signature does not hold: not this job's."""


def _signature(secret, payload):
    return hmac.new(secret.encode(), payload, hashlib.sha256).digest()


class MirrorWriter:
    """Writes submitted snapshots to `directory` (made private here first);
    `on_written(number)` runs after each file is in place."""

    def __init__(self, directory, secret, on_written=None):
        make_private_dir(directory)
        self._path = os.path.join(directory, MIRROR_FILE)
        self._secret, self._on_written = secret, on_written
        self._pending, self._cond, self._closed = None, threading.Condition(), False
        self._written = 0  # commits written, for flush()
        self._submitted = 0
        self.error = None  # why the last write failed, if it did
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
            try:
                self._write(snapshot)
            except Exception as e:  # noqa: BLE001 (a full /dev/shm must not stop training)
                self.error = e
                print("tf_ring: could not mirror the commit to %s: %s" % (self._path, e),
                      file=sys.stderr, flush=True)
            else:
                self._report(snapshot)
            with self._cond:
                self._written = max(self._written, number)
                self._cond.notify_all()

    def _report(self, snapshot):
        if self._on_written is None:
            return
        try:
            self._on_written(snapshot)
        except Exception:  # noqa: BLE001 (only informs the launcher; e.g. the engine is resetting)
            pass

    def _write(self, snapshot):
        payload = pickle.dumps(snapshot, protocol=pickle.HIGHEST_PROTOCOL)
        temp = "%s.%d.tmp" % (self._path, os.getpid())
        with create_private_file(temp) as f:
            f.write(_MAGIC + _signature(self._secret, payload) + payload)
        os.replace(temp, self._path)  # atomic: readers see the old or the new file


def load_mirror(directory, secret):
    """The mirrored snapshot in `directory`, or None when there is none.
    Raises MirrorRefused for a file this job did not sign (nothing of it is
    unpickled) and UnsafeDirectory for a directory that is not the job's."""
    if not os.path.lexists(directory):
        return None
    make_private_dir(directory)  # checks it: a squatted directory is refused
    f = open_private_file(os.path.join(directory, MIRROR_FILE))
    if f is None:
        return None
    with f:
        data = f.read()
    head, mac = data[:len(_MAGIC)], data[len(_MAGIC):len(_MAGIC) + _MAC_BYTES]
    payload = data[len(_MAGIC) + _MAC_BYTES:]
    if head != _MAGIC or not hmac.compare_digest(mac, _signature(secret, payload)):
        raise MirrorRefused("tf_ring: refusing the mirror %s: it is not signed with this job's "
                            "secret (left by another job, or planted)"
                            % os.path.join(directory, MIRROR_FILE))
    return pickle.loads(payload)
