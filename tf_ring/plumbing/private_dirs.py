"""Directories and files a job keeps on a host that other users share.

Every per-job directory (the elastic job directory in /dev/shm, its spares
folder, ...) is made by the job's own processes on the host that uses it,
mode 0700, and checked with lstat before any use: a directory (not a link),
owned by this user, no group or other bits. A name another user made first
(a squatter who guessed or saw it) is refused with an error naming it, never
used. Files inside are created with O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600.

Standard library only: tf_ring/elastic_driver/warm_spares.py imports it by path, before
any package import.
"""
import os
import stat


class UnsafeDirectory(RuntimeError):
    """A job directory that exists and is not this user's private one."""


def check_private(path):
    """Raises UnsafeDirectory unless `path` is a real directory owned by this
    user with no group or other permission bits."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise UnsafeDirectory("tf_ring: the job directory %s vanished while in use" % path)
    why = None
    if stat.S_ISLNK(info.st_mode):
        why = "it is a symbolic link"
    elif not stat.S_ISDIR(info.st_mode):
        why = "it is not a directory"
    elif info.st_uid != os.geteuid():
        why = "it belongs to user id %d, not to this job's user (%d)" % (info.st_uid, os.geteuid())
    elif info.st_mode & 0o077:
        why = "its mode is %o: group or other users may use it" % stat.S_IMODE(info.st_mode)
    if why:
        raise UnsafeDirectory(
            "tf_ring: refusing the job directory %s: %s. Another user may have made it before "
            "this job did; remove it (or ask its owner to), or run the job under another "
            "name" % (path, why))


def make_private_dir(path):
    """Makes `path` (its parent must exist) mode 0700, or accepts it if this
    job made it already (another local rank may win the race); checks it
    either way. Returns `path`."""
    try:
        os.mkdir(path, 0o700)
        os.chmod(path, 0o700)  # mkdir's mode is masked by the umask
    except FileExistsError:
        pass
    check_private(path)
    return path


def make_private_tree(base, *parts):
    """make_private_dir on base, then on each part below it; returns the
    deepest path. `base`'s own parent (e.g. /dev/shm) is not the job's."""
    path = make_private_dir(base)
    for part in parts:
        path = make_private_dir(os.path.join(path, part))
    return path


def create_private_file(path):
    """A new file at `path`, mode 0600, opened for writing (binary): refuses
    to follow a link or reuse a name. A leftover of this user's (the same
    temporary name from a crashed writer) is removed once first."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        os.unlink(path)  # in a directory check_private accepted: only this user writes there
        fd = os.open(path, flags, 0o600)
    return os.fdopen(fd, "wb")


def open_private_file(path):
    """`path` opened for reading if it is a regular file of this user, mode
    0600 or stricter, not a link; None when there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    f = os.fdopen(fd, "rb")
    info = os.fstat(f.fileno())
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        f.close()
        raise UnsafeDirectory("tf_ring: refusing %s: not a private file of this job's user "
                              "(mode %o, owner %d)" % (path, stat.S_IMODE(info.st_mode), info.st_uid))
    return f
