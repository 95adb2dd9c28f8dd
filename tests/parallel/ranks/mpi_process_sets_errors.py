"""Static process sets refusing what cannot run: a rank outside the set, a
broadcast root outside it, unregistered sets and bad ranks, init's errors,
a long mismatch message, a stall inside a set named with engine ranks.
Runs in the process_sets group after mpi_process_sets.py
(tests/parallel/test_parallel.py)."""
import threading

import pytest
import tensorflow as tf

import tf_ring as hvd
from process_sets_cases import STALL, in_step, mine, restart, sets  # noqa: F401 - fixtures


def test_a_rank_outside_the_set_gets_invalid_argument(sets):
    rank = hvd.rank()
    outside = next(ps for ps in sets if not ps.included())
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        hvd.allreduce(tf.ones(2), process_set=outside, name="outside.tensor")
    text = str(info.value)
    assert "'outside.tensor'" in text and "this rank (%d)" % rank in text
    assert "ranks %s" % ", ".join(map(str, outside.ranks)) in text and "included()" in text
    with pytest.raises(tf.errors.InvalidArgumentError, match="not a member"):
        tf.function(lambda: hvd.allgather(tf.ones([1]), process_set=outside))()


def test_broadcast_root_outside_the_set(sets):
    ps = next(s for s in mine(sets))
    other = next(r for r in range(hvd.size()) if r not in ps.ranks)
    with pytest.raises(tf.errors.InvalidArgumentError, match="root_rank %d is not a member" % other):
        hvd.broadcast(tf.ones(2), root_rank=other, process_set=ps, name="bad.root")


def test_unregistered_sets_and_bad_ranks_raise_value_error(sets):
    with pytest.raises(ValueError, match="not registered"):
        hvd.allreduce(tf.ones(2), process_set=hvd.ProcessSet([0]))
    fake = hvd.ProcessSet([0])
    fake.process_set_id = 10
    with pytest.raises(ValueError, match="not registered"):
        hvd.allreduce(tf.ones(2), process_set=fake)
    with pytest.raises(ValueError, match=r"rank\(s\) 1 appear more than once"):
        hvd.ProcessSet([0, 1, 1])
    with pytest.raises(ValueError, match="remove_process_set: the global process set"):
        hvd.remove_process_set(hvd.global_process_set)
    with pytest.raises(RuntimeError, match="TF_RING_DYNAMIC_PROCESS_SETS=1"):
        hvd.add_process_set([0])
    with pytest.raises(ValueError, match="not registered"):
        hvd.join(process_set=hvd.ProcessSet([0]))


def test_init_errors_out_of_range_and_ranks_that_disagree(sets):
    size, rank = hvd.size(), hvd.rank()
    try:
        with pytest.raises(ValueError, match="rank %d is out of range" % size):
            restart([hvd.ProcessSet([0, size])])
        with pytest.raises(ValueError, match="set of ranks 0, 1 appears twice"):
            restart([hvd.ProcessSet([2 % size]), hvd.ProcessSet([0, 1]), hvd.ProcessSet([1, 0])])
        assert hvd.process_sets() == [hvd.global_process_set]  # all or nothing
        # Rank 0 passes one list, the others another: every rank fails alike.
        theirs = [hvd.ProcessSet([0])] if rank == 0 else [hvd.ProcessSet([1])]
        with pytest.raises(ValueError, match="do not match across ranks") as info:
            restart(theirs)
        assert "rank 0: add [[0]]" in str(info.value) and "rank 1: add [[1]]" in str(info.value)
    finally:
        restart(sets)
    assert [ps.process_set_id for ps in sets] == [1, 2, 3]


def test_a_mismatch_error_longer_than_1024_characters_arrives_whole(sets):
    """The engine's message crosses into Python whole (no fixed-size buffer)."""
    count = 250  # over 2,048 characters on 2 ranks: the old C API cut messages there
    mine_ranks = [0] if hvd.rank() == 0 else [1]
    try:
        with pytest.raises(ValueError) as info:
            restart([hvd.ProcessSet(mine_ranks) for _ in range(count)])
    finally:
        restart(sets)
    message = str(info.value)
    assert len(message) > 1024, len(message)
    assert message.startswith("tf_ring: registering process sets failed: process sets do not match")
    rank0 = "rank 0: add [" + ", ".join(["[0]"] * count) + "]"
    rank1 = "rank 1: add [" + ", ".join(["[1]"] * count) + "]"
    assert rank0 in message and rank1 in message, message[:300]
    assert message.endswith("add_process_set() and remove_process_set()."), message[-200:]


def test_a_stall_inside_a_set_is_reported_with_engine_ranks(sets, capfd):
    """The set's coordinator warns about a tensor some members lack, naming
    the set and the missing member by its engine rank."""
    import os
    import time
    a_ranks, b_ranks, late = STALL[hvd.size()]
    os.environ["TF_RING_STALL_CHECK_TIME_SECONDS"] = "0.2"
    try:
        restart(sets)
        b = next(ps for ps in sets if ps.ranks == b_ranks)
        coordinator = b.ranks[0]
        if hvd.rank() == coordinator:
            thread = threading.Thread(target=lambda: hvd.allreduce(
                tf.ones(1), process_set=b, name="stall.warned"), daemon=True)
            thread.start()
            expected = ("process set %d (ranks %s): stall: tensor 'stall.warned'"
                        % (b.process_set_id, ", ".join(map(str, b.ranks))))
            seen, deadline = "", time.monotonic() + 30
            while expected not in seen and time.monotonic() < deadline:
                time.sleep(0.05)
                seen += capfd.readouterr().err
            assert expected in seen, seen[-2000:]
            assert "missing on rank(s) %d" % late in seen.split(expected)[1].split("\n")[0]
        hvd.barrier(name="stall.warned.release")
        if hvd.rank() == late:
            hvd.allreduce(tf.ones(1), process_set=b, name="stall.warned")
        if hvd.rank() == coordinator:
            thread.join(timeout=60)
            assert not thread.is_alive()
        hvd.barrier(name="stall.warned.done")  # no rank shuts down while B still runs
    finally:
        os.environ.pop("TF_RING_STALL_CHECK_TIME_SECONDS")
        restart(sets)
