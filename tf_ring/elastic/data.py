"""Re-sharding a tf.data epoch over whatever world is running now, so a reset
to a different number of ranks neither loses nor repeats a sample (what
Horovod's ElasticSampler gives PyTorch users).

The rule: an epoch is one sequence of samples, the same on every rank and in
every world (shuffle it with a fixed seed per epoch). The committed state
counts `processed`, the samples of that sequence the whole world has
finished. Whatever the world's size, the rest of the epoch is the sequence
after `processed`, dealt out round robin: element i of the rest goes to rank
i % size. So one step of `batch_size` per rank consumes exactly the next
size * batch_size samples of the sequence, and after any number of whole
steps the finished samples are again a prefix, whichever ranks did them."""
from tf_ring.runtime import basics


def shard_dataset(dataset, processed=0, rank=None, size=None):
    """This rank's part of the rest of the epoch: `dataset` (unbatched, in
    the same order on every rank) without its first `processed` samples,
    then every size-th sample from this rank's. Batch it afterwards.
    rank and size default to this process's (tf_ring.rank(), tf_ring.size()).
    tf.data's skip() reads the skipped samples, so resuming late in an epoch
    of an expensive pipeline costs a pass over them (put skip-friendly
    steps, such as file reading, after this call where you can)."""
    rank = basics.rank() if rank is None else rank
    size = basics.size() if size is None else size
    if not 0 <= rank < size:
        raise ValueError("shard_dataset: rank %d is not in a world of %d ranks" % (rank, size))
    if processed < 0:
        raise ValueError("shard_dataset: processed must be >= 0, got %d" % processed)
    return dataset.skip(processed).shard(size, rank)


def samples_per_step(batch_size, size=None):
    """How many samples of the epoch one step of `batch_size` per rank
    finishes: add it to the state's `processed` after every whole step."""
    return batch_size * (basics.size() if size is None else size)


def steps_left(epoch_samples, processed, batch_size, size=None):
    """Steps every rank runs to finish the epoch. The last one may find
    fewer than batch_size samples (or none) on some ranks: those ranks
    still take part in its collectives, or call tf_ring.join()."""
    per_step = samples_per_step(batch_size, size)
    return max(0, -(-(epoch_samples - processed) // per_step))


__all__ = ["samples_per_step", "shard_dataset", "steps_left"]
