"""Issue 58: KerasEstimator's store sets its modes through descriptors opened
without following links. Another user of a "group" store can write its run
directory, and so can swap a file or folder there for a link to one of the
job user's own files at the worst moment, just before the mode is set;
that file must keep its mode. The swap is made from inside the mode change
(the attacker winning the race every time)."""
import os
import stat

import pytest

from tf_ring.spark.keras import store


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def victim(tmp_path):
    """A private file and folder of the job's user, outside the store."""
    secret = tmp_path / "victim.txt"
    secret.write_text("private")
    os.chmod(secret, 0o600)
    folder = tmp_path / "victim-dir"
    folder.mkdir()
    os.chmod(folder, 0o700)
    return secret, folder


def swap_before_chmod(monkeypatch, name, target):
    """Replaces `name` (an absolute path) by a link to `target` right before
    tf_ring sets its mode (by path or by descriptor)."""
    real_chmod, real_fchmod = os.chmod, os.fchmod
    swapped = []

    def swap():
        if not swapped and os.path.lexists(name):
            swapped.append(True)
            aside = name + ".aside"
            os.rename(name, aside)
            os.symlink(target, name)

    def chmod(path, *args, **kwargs):
        if os.path.abspath(path) == name:
            swap()
        return real_chmod(path, *args, **kwargs)

    def fchmod(fd, *args):
        if os.readlink("/proc/self/fd/%d" % fd) == name:
            swap()
        return real_fchmod(fd, *args)
    monkeypatch.setattr(store.os, "chmod", chmod)
    monkeypatch.setattr(store.os, "fchmod", fchmod)
    return swapped


def test_a_file_swapped_for_a_link_keeps_the_victims_mode(tmp_path, victim, monkeypatch):
    secret, _ = victim
    run_dir = store.make_run_dir(str(tmp_path / "store" / "run-1"), "group")
    os.mkdir(os.path.join(run_dir, "train"))
    part = os.path.join(run_dir, "train", "part-0.parquet")
    with open(part, "w") as f:
        f.write("rows")
    os.chmod(part, 0o644)
    swapped = swap_before_chmod(monkeypatch, part, str(secret))
    store.settle_modes(run_dir, "group")
    assert swapped and os.path.islink(part)
    assert mode(secret) == 0o600, "the store's mode reached the victim's file through a link"
    assert mode(part + ".aside") == 0o660  # the file tf_ring opened got the group's mode
    assert mode(os.path.join(run_dir, "train")) == 0o2770


def test_a_folder_swapped_for_a_link_keeps_the_victims_mode(tmp_path, victim, monkeypatch):
    _, folder = victim
    run_dir = store.make_run_dir(str(tmp_path / "store" / "run-2"), "group")
    train = os.path.join(run_dir, "train")
    os.mkdir(train, 0o755)
    swapped = swap_before_chmod(monkeypatch, train, str(folder))
    store.settle_modes(run_dir, "group")
    assert swapped and mode(folder) == 0o700
    assert mode(train + ".aside") == 0o2770


def test_the_run_directory_swapped_for_a_link_keeps_the_victims_mode(tmp_path, victim,
                                                                      monkeypatch):
    _, folder = victim
    run_dir = str(tmp_path / "store" / "run-3")
    swapped = swap_before_chmod(monkeypatch, run_dir, str(folder))
    store.make_run_dir(run_dir, "group")
    assert swapped and mode(folder) == 0o700
    assert mode(run_dir + ".aside") == 0o2770


def test_a_link_in_place_of_the_run_directory_is_refused(tmp_path, victim):
    _, folder = victim
    run_dir = tmp_path / "store" / "run-4"
    run_dir.parent.mkdir()
    os.symlink(folder, run_dir)
    with pytest.raises(ValueError, match="refusing the run directory"):
        store.make_run_dir(str(run_dir), "group")
    assert mode(folder) == 0o700


def test_links_already_there_are_left_alone(tmp_path, victim):
    secret, folder = victim
    run_dir = store.make_run_dir(str(tmp_path / "store" / "run-5"), "private")
    os.symlink(secret, os.path.join(run_dir, "to-file"))
    os.symlink(folder, os.path.join(run_dir, "to-dir"))
    with open(os.path.join(run_dir, "rows"), "w"):
        pass
    store.settle_modes(run_dir, "group")
    assert (mode(secret), mode(folder)) == (0o600, 0o700)
    assert mode(os.path.join(run_dir, "rows")) == 0o660
