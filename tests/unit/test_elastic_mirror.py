"""The host-local commit mirror: written in the background, atomically,
newest snapshot wins, read back equal; private (0700 directory, 0600 file);
a file not signed with the job's secret is refused before unpickling, and a
directory another user made first is refused by name."""
import os
import pickle
import stat

import numpy as np
import pytest

from tf_ring.elastic import mirror
from tf_ring.plumbing import private_dirs

SECRET = "0123456789abcdef"


def test_mirror_round_trip_and_newest_wins(tmp_path):
    directory = str(tmp_path / "job")
    writer = mirror.MirrorWriter(directory, SECRET)
    assert mirror.load_mirror(directory, SECRET) is None
    weights = np.arange(6, dtype=np.float32)
    for step in range(20):
        writer.submit({"step": step, "weights": weights * step})
    assert writer.flush(timeout=10)
    got = mirror.load_mirror(directory, SECRET)
    assert got["step"] == 19 and np.array_equal(got["weights"], weights * 19)
    writer.close()
    assert [n for n in os.listdir(directory) if n.endswith(".tmp")] == []
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(os.path.join(directory, mirror.MIRROR_FILE)).st_mode) == 0o600


def test_a_half_written_temp_file_never_replaces_the_mirror(tmp_path):
    directory = str(tmp_path / "job")
    writer = mirror.MirrorWriter(directory, SECRET)
    writer.submit({"step": 1})
    writer.close()
    # what a crash mid-write leaves behind: a temp file, never the mirror itself
    with open(os.path.join(directory, mirror.MIRROR_FILE + ".999.tmp"), "wb") as f:
        f.write(b"\x80\x05trunc")
    assert mirror.load_mirror(directory, SECRET) == {"step": 1}


class _RunsCode:
    def __reduce__(self):
        return (os.system, ("touch %s" % _RunsCode.marker,))


def test_a_planted_mirror_is_refused_without_unpickling(tmp_path):
    directory = tmp_path / "job"
    directory.mkdir(mode=0o700)
    _RunsCode.marker = str(tmp_path / "ran")
    planted = pickle.dumps({"commit": 99, "state": _RunsCode()})
    for content in (planted, b"tf_ring-mirror-1\n" + b"\0" * 32 + planted):
        path = directory / mirror.MIRROR_FILE
        path.write_bytes(content)
        path.chmod(0o600)
        with pytest.raises(mirror.MirrorRefused, match="not signed with this job's secret"):
            mirror.load_mirror(str(directory), SECRET)
    # Signed with another job's secret: refused too.
    writer = mirror.MirrorWriter(str(directory), "another job's secret")
    writer.submit({"step": 3})
    writer.close()
    with pytest.raises(mirror.MirrorRefused):
        mirror.load_mirror(str(directory), SECRET)
    assert not os.path.exists(_RunsCode.marker)


@pytest.mark.parametrize("squat", ["open_mode", "symlink", "file"])
def test_a_squatted_job_directory_is_refused_by_name(tmp_path, squat):
    directory = tmp_path / "job"
    if squat == "open_mode":
        directory.mkdir()
        directory.chmod(0o777)
    elif squat == "symlink":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        directory.symlink_to(tmp_path / "elsewhere")
    else:
        directory.write_text("")
    with pytest.raises(private_dirs.UnsafeDirectory, match="refusing the job directory %s"
                       % directory):
        mirror.MirrorWriter(str(directory), SECRET)
    with pytest.raises(private_dirs.UnsafeDirectory):
        mirror.load_mirror(str(directory), SECRET)


def test_private_files_never_follow_a_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    link = tmp_path / "0.pid"
    link.symlink_to(victim)
    with private_dirs.create_private_file(str(link)) as f:  # the link is replaced, not followed
        f.write(b"123")
    assert victim.read_text() == "keep"
    assert not os.path.islink(link) and stat.S_IMODE(os.stat(link).st_mode) == 0o600
