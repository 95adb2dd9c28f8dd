"""The restart mirror on 2 and 3 ranks, each rank with a directory of its own
(as each host has its own /dev/shm): a relaunched world resumes from the
newest commit any rank holds, whichever rank that is; a world that finds no
commit while the launcher knew of one stops on every rank with an error
instead of training again from the start; a squatted or planted mirror
stops every rank naming it."""
import os
import shutil
import tempfile

import numpy as np
import pytest
import tensorflow as tf

import tf_ring as hvd
from tf_ring import elastic
from tf_ring.elastic import mirror, restart
from tf_ring.plumbing import env_names

SECRET = "mirror-test-secret"


@pytest.fixture
def own_directory(monkeypatch):
    """A private job directory per rank; restart's per-process state reset."""
    base = tempfile.mkdtemp(prefix="tfr-mirror-%d-" % hvd.rank())
    path = os.path.join(base, "tf_ring-elastic-test")
    monkeypatch.setenv("TF_RING_ELASTIC_STATE_DIR", path)
    monkeypatch.setenv("TF_RING_ELASTIC_SECRET", SECRET)
    monkeypatch.setattr(restart, "_mirror_taken", False)
    monkeypatch.setattr(restart, "_commits", 0)
    monkeypatch.setattr(restart, "_writer", None)
    yield path
    shutil.rmtree(base, ignore_errors=True)


def _mirror(path, commit, weights, step):
    """What a rank's host holds after commit number `commit`."""
    writer = mirror.MirrorWriter(path, SECRET)
    writer.submit({"commit": commit, "state": {
        "attributes": {"step": step}, "variables": [np.asarray(weights, np.float32)]}})
    writer.close()


def _state(value):
    return elastic.TensorFlowState([tf.Variable(np.full(3, value, np.float32))], step=0)


def test_the_newest_commit_wins_wherever_it_is(own_directory, monkeypatch):
    # Ranks hold commits 1..size, the last rank the newest: everyone resumes from it.
    monkeypatch.setenv(env_names.ELASTIC_COMMITTED, str(hvd.size()))
    _mirror(own_directory, hvd.rank() + 1, np.full(3, 10.0 * (hvd.rank() + 1)), 100 + hvd.rank())
    state = _state(-1.0)
    state.sync()
    newest = hvd.size()
    np.testing.assert_array_equal(state.variables[0].numpy(), np.full(3, 10.0 * newest))
    assert state.step == 100 + newest - 1
    assert restart._commits == newest  # the numbering goes on from there


def test_no_commit_anywhere_while_one_was_made_stops_every_rank(own_directory, monkeypatch):
    monkeypatch.setenv(env_names.ELASTIC_COMMITTED, "4")
    with pytest.raises(restart.CommitLost, match="committed its state 4 times"):
        _state(0.0).sync()


def test_a_first_world_without_commits_starts_fresh(own_directory, monkeypatch):
    monkeypatch.setenv(env_names.ELASTIC_COMMITTED, "0")
    state = _state(1.0 + hvd.rank())
    state.sync()  # rank 0's values, no mirror involved
    np.testing.assert_array_equal(state.variables[0].numpy(), np.full(3, 1.0))


def test_a_planted_mirror_on_one_rank_stops_every_rank_naming_it(own_directory):
    if hvd.rank() == hvd.size() - 1:
        os.mkdir(own_directory, 0o700)
        with open(os.path.join(own_directory, mirror.MIRROR_FILE), "wb") as f:
            f.write(b"cos\nsystem\n(S'true'\ntR.")  # a pickle that would run a command
        os.chmod(os.path.join(own_directory, mirror.MIRROR_FILE), 0o600)
    with pytest.raises(restart.CommitLost, match="rank %d: .*not signed" % (hvd.size() - 1)):
        _state(0.0).sync()


def test_a_squatted_directory_on_one_rank_stops_every_rank_naming_it(own_directory):
    if hvd.rank() == 0:
        os.mkdir(own_directory)
        os.chmod(own_directory, 0o777)
    with pytest.raises(restart.CommitLost, match="rank 0: .*refusing the job directory %s"
                       % ("" if hvd.rank() else own_directory)):
        _state(0.0).sync()
