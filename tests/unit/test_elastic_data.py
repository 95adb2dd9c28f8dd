"""tf_ring.elastic.shard_dataset in one process, with the ranks of each
world played by explicit (rank, size): a shuffled epoch started on 3 ranks
and finished on 2 after a reset mid-epoch processes every sample exactly once
(the real 2- and 3-rank runs: tests/parallel/ranks/mpi_elastic_data.py)."""
import collections

import numpy as np
import pytest
import tensorflow as tf

from tf_ring import elastic

N, B, SEED = 103, 4, 7  # 103: no world size divides it, so the last step is ragged


def epoch(e):
    """The epoch's sample order: the same on every rank and in every world."""
    return tf.data.Dataset.range(N).shuffle(N, seed=SEED + e, reshuffle_each_iteration=False)


def batches(rank, size, processed, e=0):
    ds = elastic.shard_dataset(epoch(e), processed, rank=rank, size=size).batch(B)
    return [b.numpy().tolist() for b in ds]


def run_world(size, processed, steps):
    """`steps` steps of a world of `size`: the samples each rank trained on."""
    per_rank = [batches(r, size, processed)[:steps] for r in range(size)]
    return [x for rank_batches in per_rank for batch in rank_batches for x in batch]


def test_three_ranks_then_two_mid_epoch_process_every_sample_once():
    order = list(epoch(0).as_numpy_iterator())
    assert sorted(order) == list(range(N)) and order != list(range(N))  # shuffled
    committed_steps = 5
    done = run_world(3, 0, committed_steps)  # committed: state.processed after them
    processed = committed_steps * elastic.samples_per_step(B, size=3)
    # One more step ran on 3 ranks but was never committed: the reset restores
    # `processed` and those samples are trained again (their updates were lost).
    assert processed == 60 and sorted(done) == sorted(order[:processed])
    left = elastic.steps_left(N, processed, B, size=2)
    assert left == 6  # 43 samples over 2 ranks x 4
    done += run_world(2, processed, left)
    assert sorted(done) == list(range(N)), collections.Counter(done).most_common(3)


def test_every_whole_step_finishes_a_prefix_of_the_epoch():
    order = list(epoch(0).as_numpy_iterator())
    for size in (2, 3):
        for steps in range(1, 4):
            assert sorted(run_world(size, 8, steps)) == sorted(order[8:8 + steps * size * B])


def test_the_ragged_last_step_and_steps_left():
    # 103 - 96 = 7 samples left on 3 ranks x 4: one step, ranks get 3, 2, 2.
    assert elastic.steps_left(N, 96, B, size=3) == 1
    assert [len(batches(r, 3, 96)[0]) for r in range(3)] == [3, 2, 2]
    assert elastic.steps_left(N, N, B, size=3) == 0 and batches(0, 3, N) == []
    # 2 samples left on 3 ranks: rank 2 has none, the others one each.
    assert [sum(len(b) for b in batches(r, 3, N - 2)) for r in range(3)] == [1, 1, 0]


def test_a_new_epoch_has_its_own_order_and_starts_from_zero():
    a = np.concatenate([np.concatenate(batches(r, 2, 0, e=1)) for r in range(2)])
    assert sorted(a.tolist()) == list(range(N))
    assert batches(0, 2, 0, e=1) != batches(0, 2, 0, e=0)


def test_bad_arguments_are_clear():
    with pytest.raises(ValueError, match="rank 3 is not in a world of 3"):
        elastic.shard_dataset(epoch(0), 0, rank=3, size=3)
    with pytest.raises(ValueError, match="processed must be >= 0"):
        elastic.shard_dataset(epoch(0), -1, rank=0, size=2)
