"""The channel from the elastic driver to rank 0: host-change notices in a
file inside the job's private directory.

The driver creates TF_RING_ELASTIC_DIR with mode 0700 and puts a per-job
secret in TF_RING_ELASTIC_SECRET; each notice is one line
`<secret> <timestamp> <result>`. Rank 0 reads only lines carrying the secret,
so a stray writer (or a notice file left by another job) is ignored. A file,
not a socket, because rank 0 polls at commit time anyway and a file needs no
listener that could die with the job."""
import os
import secrets

NOTICE_FILE = "host_notices"


def make_job_dir(base, job):
    """Creates the private directory for `job` under `base`; returns
    (path, secret) for the driver to put into the ranks' environment."""
    path = os.path.join(base, "tf_ring-elastic-%s" % job)
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)  # makedirs' mode is masked by umask; be explicit
    return path, secrets.token_hex(16)


def write_notice(path, secret, timestamp, result):
    """Appends one notice; a single short write, so a reader sees whole lines."""
    fd = os.open(os.path.join(path, NOTICE_FILE), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, ("%s %r %d\n" % (secret, float(timestamp), int(result))).encode())
    finally:
        os.close(fd)


def clear_notices(path):
    """Drops the notices acted on (the driver calls it before each launch)."""
    try:
        os.remove(os.path.join(path, NOTICE_FILE))
    except FileNotFoundError:
        pass


class FileNoticeSource:
    """A host-update source (see hosts.set_host_update_source) that returns
    the notices appended since its last call."""

    def __init__(self, path, secret):
        self._file, self._secret, self._offset = os.path.join(path, NOTICE_FILE), secret, 0

    def __call__(self):
        try:
            with open(self._file, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return []
        complete = data[:data.rfind(b"\n") + 1]  # leave a partial last line for next time
        self._offset += len(complete)
        found = []
        for line in complete.decode(errors="replace").splitlines():
            parts = line.split()
            if len(parts) == 3 and secrets.compare_digest(parts[0], self._secret):
                try:
                    found.append((float(parts[1]), int(parts[2])))
                except ValueError:
                    continue
        return found


def source_from_environment(environ=None):
    """The file source when this process was started by the elastic driver,
    else None."""
    env = os.environ if environ is None else environ
    path, secret = env.get("TF_RING_ELASTIC_DIR"), env.get("TF_RING_ELASTIC_SECRET")
    return FileNoticeSource(path, secret) if path and secret else None
