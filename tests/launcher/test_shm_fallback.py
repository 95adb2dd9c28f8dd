"""A host whose /dev/shm cannot hold the default shared-memory chunks (a
Docker container's 64 MB, with many ranks) falls back to smaller chunks on
every host and says so; a chunk the user set is never shrunk: the job stops
at init with an error naming /dev/shm and the fix. Each job runs in its own
mount namespace with a small tmpfs on /dev/shm (needs root)."""
import os
import shutil
import subprocess

import pytest

from conftest import REPO, tfringrun_cmd

JOB = os.path.join(REPO, "tests", "jobs", "shm_small_dev_shm.py")
DEFAULT_CHUNK_MB, FALLBACK_CHUNK_MB = 4, 1  # engine.cc's kDefault/kFallbackShmChunkBytes

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="mounting a small /dev/shm in a private mount namespace needs root and unshare")


def run_with_dev_shm(np, megabytes, env=None):
    # Each rank maps 4 areas of one chunk: the default needs 16 MB a rank,
    # the fallback 4 MB. The tmpfs holds 10 MB a rank: only the fallback fits.
    mount = "mount -t tmpfs -o size=%dm tmpfs /dev/shm && exec \"$@\"" % megabytes
    full_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
    return subprocess.run(["unshare", "-m", "sh", "-c", mount, "sh"] + tfringrun_cmd(np, "python", JOB),
                          cwd=REPO, env=full_env, text=True, capture_output=True, timeout=300)


@pytest.mark.parametrize("np", [2, 3])
def test_default_chunk_falls_back_when_dev_shm_is_small(np):
    result = run_with_dev_shm(np, 10 * np)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    for r in range(np):
        assert "rank %d: exact" % r in output, output[-6000:]
    assert ("%d KB chunks do not fit" % (DEFAULT_CHUNK_MB * 1024)) in output, output[-6000:]
    assert ("using %d KB chunks" % (FALLBACK_CHUNK_MB * 1024)) in output, output[-6000:]
    assert output.count("chunks do not fit") == 1, output[-6000:]  # rank 0 says it once


def test_a_chunk_the_user_set_is_not_shrunk():
    result = run_with_dev_shm(2, 20, env={"TF_RING_SHM_CHUNK_BYTES": str(8 << 20)})
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-6000:]
    assert "exact" not in output, output[-6000:]
    assert "/dev/shm" in output and "TF_RING_SHM=0" in output, output[-6000:]
    assert "chunks do not fit" not in output, output[-6000:]
