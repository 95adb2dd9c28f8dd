"""tf_ring.elastic.shard_dataset on 2 and 3 real ranks: with the default
(rank, size), every whole step's batches of all ranks are the next
size * batch_size samples of the epoch, and the rest of the epoch from any
committed point is covered exactly once (checked against the epoch's order
computed on each rank alone)."""
import tensorflow as tf

import tf_ring as hvd
from tf_ring import elastic

N, B = 50, 3


def epoch():
    return tf.data.Dataset.range(N).shuffle(N, seed=11, reshuffle_each_iteration=False)


def my_batches(processed):
    return [b.numpy().tolist() for b in elastic.shard_dataset(epoch(), processed).batch(B)]


def test_rest_of_epoch_is_covered_once_whatever_was_processed():
    order = list(epoch().as_numpy_iterator())
    for processed in (0, 7, 2 * hvd.size() * B, N - 1):
        mine = my_batches(processed)
        steps = elastic.steps_left(N, processed, B)
        assert len(mine) <= steps  # no rank has a batch beyond the last step
        everyone = hvd.allgather_object(mine, name="shard.%d" % processed)
        flat = [x for batches in everyone for batch in batches for x in batch]
        assert sorted(flat) == sorted(order[processed:]), (processed, everyone)
        for step in range(steps - 1):  # whole steps finish a prefix
            upto = processed + (step + 1) * elastic.samples_per_step(B)
            seen = [x for batches in everyone for batch in batches[:step + 1] for x in batch]
            assert sorted(seen) == sorted(order[processed:upto])
