"""Where a KerasEstimator keeps one fit's rows: a run directory under the
estimator's `store`, private to the job's user by default.

store_mode="private": the run directory 0700, everything in it 0600 (the
training data is the user's; other users of the store's machines must not
read it). store_mode="group": 2770 and 0660, for a store that the users of
one group share (executors running as another user of that group): the
run directory takes the store's group (when the user is in it), and the
set-group-id bit passes it on to everything made inside.

Spark's writers create files with their JVM's umask (Hadoop's local file
system takes no umask from the writer's options: checked with Spark 4.3),
so the driver makes the run directory first, with the mode's bits (from
then on nothing below it is reachable by other users, whatever its own
bits), and sets every mode below it once the writers are done."""
import os
import stat

MODES = {"private": (0o700, 0o600), "group": (0o2770, 0o660)}


def check_mode(store_mode):
    if store_mode not in MODES:
        raise ValueError("KerasEstimator: store_mode=%r; use \"private\" (the job's user only, "
                         "the default) or \"group\" (the store's group too)" % (store_mode,))
    return store_mode


def make_run_dir(path, store_mode):
    """Makes `path` (its parents as needed) with the mode's directory bits;
    an existing `path` must be this user's directory (not a link). The
    bits are set through a descriptor opened without following a link, so
    a link another user of the store swaps in is refused, never chmod'ed."""
    directory_mode = MODES[store_mode][0]
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    try:
        os.mkdir(path, directory_mode & 0o777)
    except FileExistsError:
        pass
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:  # ELOOP (a link), ENOTDIR (a file)
        fd = None
    try:
        if fd is None or not _owned(os.fstat(fd), stat.S_ISDIR):
            raise ValueError("KerasEstimator: refusing the run directory %s: it is not a directory "
                             "of this user (a link, a file or another user's); choose another "
                             "run_id or store" % path)
        if store_mode == "group":
            try:
                os.fchown(fd, -1, os.stat(parent).st_gid)
            except PermissionError:
                pass  # not in the store's group: the user's own group shares it
        os.fchmod(fd, directory_mode)  # mkdir's mode is masked by the umask
    finally:
        if fd is not None:
            os.close(fd)
    return path


def settle_modes(path, store_mode):
    """Sets the mode's bits on everything below `path` that this user owns
    (in a group's store another member's writer owns its files); links are
    left alone. Every name is opened relative to its folder's descriptor
    without following a link (os.fwalk), and its bits set through that
    descriptor: a link swapped in for a file or folder meanwhile is never
    followed."""
    directory_mode, file_mode = MODES[store_mode]
    for _, dirs, files, folder in os.fwalk(path, follow_symlinks=False):
        for name in dirs:
            _fchmod(folder, name, os.O_DIRECTORY, directory_mode, stat.S_ISDIR)
        for name in files:
            _fchmod(folder, name, os.O_NONBLOCK | os.O_NOCTTY, file_mode, stat.S_ISREG)


def _owned(info, kind):
    return kind(info.st_mode) and info.st_uid == os.geteuid()


def _fchmod(folder, name, flags, mode, kind):
    """chmod `name` in the folder `folder` (a descriptor) when it is this
    user's and of `kind`; a link there (ELOOP) or a name gone is skipped."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | flags, dir_fd=folder)
    except OSError:
        return
    try:
        if _owned(os.fstat(fd), kind):
            os.fchmod(fd, mode)
    finally:
        os.close(fd)
