"""The host-local commit mirror: written in the background, atomically,
newest snapshot wins, and read back equal."""
import os

import numpy as np

from tf_ring.elastic import mirror


def test_mirror_round_trip_and_newest_wins(tmp_path):
    writer = mirror.MirrorWriter(str(tmp_path))
    assert mirror.load_mirror(str(tmp_path)) is None
    weights = np.arange(6, dtype=np.float32)
    for step in range(20):
        writer.submit({"step": step, "weights": weights * step})
    assert writer.flush(timeout=10)
    got = mirror.load_mirror(str(tmp_path))
    assert got["step"] == 19 and np.array_equal(got["weights"], weights * 19)
    writer.close()
    assert [n for n in os.listdir(tmp_path) if n.endswith(".tmp")] == []


def test_a_half_written_temp_file_never_replaces_the_mirror(tmp_path):
    writer = mirror.MirrorWriter(str(tmp_path))
    writer.submit({"step": 1})
    writer.close()
    # what a crash mid-write leaves behind: a temp file, never the mirror itself
    (tmp_path / (mirror.MIRROR_FILE + ".999.tmp")).write_bytes(b"\x80\x05trunc")
    assert mirror.load_mirror(str(tmp_path)) == {"step": 1}
