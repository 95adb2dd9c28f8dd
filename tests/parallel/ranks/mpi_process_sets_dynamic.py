"""Dynamic process sets (TF_RING_DYNAMIC_PROCESS_SETS=1): add_process_set and
remove_process_set while training, called collectively by every rank."""
import os
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

import tf_ring as hvd


@pytest.fixture(scope="module", autouse=True)
def dynamic_engine():
    os.environ["TF_RING_DYNAMIC_PROCESS_SETS"] = "1"
    hvd.shutdown()
    hvd.init()
    yield
    os.environ.pop("TF_RING_DYNAMIC_PROCESS_SETS")
    hvd.shutdown()
    hvd.init()


@pytest.fixture(autouse=True)
def in_step():
    yield
    hvd.barrier(name="after_test")


def summed_ranks(ps, name):
    """Sum over the set of (rank + 1), or None off the set."""
    if not ps.included():
        return None
    out = hvd.allreduce(tf.constant([float(hvd.rank() + 1)]), op=hvd.Sum, process_set=ps, name=name)
    assert float(out[0]) == sum(r + 1 for r in ps.ranks)
    return out


def test_add_use_and_remove_sets():
    size = hvd.size()
    first = hvd.add_process_set([size - 1, 0])  # a list: sorted into a new ProcessSet
    second = hvd.add_process_set(hvd.ProcessSet(list(range(1, size))))
    assert (first.process_set_id, first.ranks) == (1, [0, size - 1])
    assert (second.process_set_id, second.ranks) == (2, list(range(1, size)))
    assert hvd.process_sets() == [hvd.global_process_set, first, second]
    for step in range(3):
        summed_ranks(first, "dyn.first")
        summed_ranks(second, "dyn.second")
    assert hvd.remove_process_set(first) is True
    assert first.process_set_id is None and hvd.process_sets() == [hvd.global_process_set, second]
    with pytest.raises(ValueError, match="not registered"):
        hvd.allreduce(tf.ones(1), process_set=first)
    again = hvd.add_process_set([0, size - 1])
    assert again.process_set_id == 3  # ids are never reused
    summed_ranks(again, "dyn.again")
    summed_ranks(second, "dyn.second")
    hvd.remove_process_set(again)
    hvd.remove_process_set(second)
    assert hvd.process_sets() == [hvd.global_process_set]


def test_a_removed_set_keeps_its_ranks_and_can_be_added_again():
    size = hvd.size()
    ps = hvd.add_process_set(list(range(1, size)))
    hvd.remove_process_set(ps)
    assert ps.process_set_id is None and ps.ranks == list(range(1, size))
    assert hvd.add_process_set(ps) is ps and ps.process_set_id is not None
    assert hvd.process_sets() == [hvd.global_process_set, ps]
    summed_ranks(ps, "dyn.readded")
    hvd.remove_process_set(ps)


def test_a_set_added_later_trains_while_the_global_set_runs():
    size, rank = hvd.size(), hvd.rank()
    ps = hvd.add_process_set([0, 1])

    @tf.function
    def step(x):
        return (hvd.allreduce(x, op=hvd.Average, process_set=ps, name="dyn.fn.set"),
                hvd.allreduce(x, op=hvd.Average, name="dyn.fn.global"))

    for _ in range(3):
        if ps.included():
            local, world = step(tf.constant([float(rank)]))
            assert float(local[0]) == 0.5
        else:  # the global allreduce of the members' step
            world = hvd.allreduce(tf.constant([float(rank)]), op=hvd.Average, name="dyn.fn.global")
        assert float(world[0]) == pytest.approx(np.mean(range(size)))
        world = hvd.allreduce(tf.constant([float(rank)]), op=hvd.Average, name="dyn.global")
        assert float(world[0]) == pytest.approx(np.mean(range(size)))
    hvd.remove_process_set(ps)


def test_removing_a_set_fails_its_pending_collectives():
    """Rank 0 has a collective of the set pending (rank 1 never submits it);
    the removal fails it on rank 0 with an error naming the set."""
    ps = hvd.add_process_set([0, 1])
    result = {}
    if hvd.rank() == 0:
        def pending():
            try:
                hvd.allreduce(tf.ones(2), process_set=ps, name="dyn.never")
            except tf.errors.AbortedError as e:
                result["error"] = str(e)
        thread = threading.Thread(target=pending, daemon=True)
        thread.start()
        deadline = time.monotonic() + 60  # until the set's coordinator has the request
        while hvd.stats(process_set=ps)["cache_misses"] < 1 and time.monotonic() < deadline:
            time.sleep(0.005)
    ps_id = ps.process_set_id
    hvd.remove_process_set(ps)
    if hvd.rank() == 0:
        thread.join(timeout=60)
        assert not thread.is_alive()
        assert "process set %d (ranks 0, 1) was removed" % ps_id in result["error"], result


def test_dynamic_errors():
    size, rank = hvd.size(), hvd.rank()
    ps = hvd.add_process_set([0])
    with pytest.raises(ValueError, match=r"process set .*\(ranks 0\) is already registered"):
        hvd.add_process_set([0])
    with pytest.raises(ValueError, match="rank %d is out of range" % size):
        hvd.add_process_set([0, size])
    mine = [0] if rank == 0 else [1]  # rank 0 asks for another set than the rest
    with pytest.raises(ValueError, match="do not match across ranks"):
        hvd.add_process_set(mine)
    with pytest.raises(ValueError, match="global process set .* cannot be removed"):
        hvd.remove_process_set(hvd.global_process_set)
    hvd.remove_process_set(ps)
    with pytest.raises(ValueError, match="not registered"):
        hvd.remove_process_set(ps)


def test_init_dynamic_turns_them_on_without_the_variable():
    os.environ.pop("TF_RING_DYNAMIC_PROCESS_SETS")
    try:
        hvd.shutdown()
        hvd.init(process_sets="dynamic")
        ps = hvd.add_process_set([0, 1])
        assert ps.process_set_id == 1  # a new engine numbers its sets afresh
        summed_ranks(ps, "dyn.init")
        hvd.remove_process_set(ps)
        hvd.shutdown()
        hvd.init()
        with pytest.raises(RuntimeError, match="TF_RING_DYNAMIC_PROCESS_SETS=1"):
            hvd.add_process_set([0, 1])
    finally:
        os.environ["TF_RING_DYNAMIC_PROCESS_SETS"] = "1"
        hvd.shutdown()
        hvd.init()  # the variable is read at init()


def test_rank_0s_variable_decides_on_every_rank():
    # A rank allowed to add sets while another is not would wait in the
    # change's collective for a rank that raised instead.
    variable, last, me = "TF_RING_DYNAMIC_PROCESS_SETS", hvd.size() - 1, hvd.rank()
    try:
        for set_on, allowed in ((0, True), (last, False)):
            hvd.shutdown()
            os.environ.pop(variable)
            if me == set_on:
                os.environ[variable] = "1"
            hvd.init()
            os.environ[variable] = "1"  # too late: init() has read it
            if allowed:
                ps = hvd.add_process_set([0, last])
                summed_ranks(ps, "dyn.rank0")
                hvd.remove_process_set(ps)
            else:
                with pytest.raises(RuntimeError, match="rank 0's value counts for every rank"):
                    hvd.add_process_set([0, last])
            assert hvd.engine_params()["settings"][variable] == ("1" if allowed else None)
    finally:
        os.environ[variable] = "1"
        hvd.shutdown()
        hvd.init()
