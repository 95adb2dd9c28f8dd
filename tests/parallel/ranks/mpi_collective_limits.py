"""Errors decided together. A size limit is checked from what every rank
knows (the agreed splits and row counts), and a rank that cannot allocate
a collective's memory tells the others before any data moves, so every
rank raises the same error and the engine keeps working. The collectives'
scratch memory goes back to its bound after a collective that needed more.

Numbers are computed independently with NumPy; errors are checked by
class and by the text naming the tensor and the ranks."""
import os
import re
import resource
from contextlib import contextmanager

import numpy as np
import pytest
import tensorflow as tf

import tf_ring as hvd
from helpers import all_inputs

MIB = 1 << 20
GIB = 1 << 30


def expect_error(error, fn, *fragments):
    with pytest.raises(error) as info:
        fn()
    for fragment in fragments:
        assert re.search(fragment, str(info.value)), "%r not in %r" % (fragment, str(info.value))


def assert_engine_works(name):
    got = hvd.allreduce(tf.constant([hvd.rank() + 1.0]), op=hvd.Sum, name=name)
    assert got.numpy().tolist() == [hvd.size() * (hvd.size() + 1) / 2]


def test_alltoall_past_2gib_between_one_pair_fails_on_every_rank():
    # Rank 0 sends 2^31 + 2 bytes (2-byte rows) to rank 1 and a row to each
    # other rank; the rest send a row each. Only ranks 0 and 1 see the large
    # count in their own row and column of the splits: the others must
    # raise too rather than wait in the exchange.
    size = hvd.size()
    splits = [0, GIB + 1] + [1] * (size - 2) if hvd.rank() == 0 else [1] * size
    tensor = tf.zeros([sum(splits), 2], tf.int8)
    expect_error(tf.errors.InvalidArgumentError,
                 lambda: hvd.alltoall(tensor, splits=splits, name="a2a_big"),
                 r"alltoall of tensor 'a2a_big' has invalid arguments",
                 r"rank 0 sends 2147483650 bytes to rank 1")
    del tensor
    assert_engine_works("after_a2a_big")


def vm_size():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmSize in /proc/self/status")


@contextmanager
def address_space_left(headroom, on_rank):
    """On `on_rank` only, lets the process map just `headroom` more bytes:
    a real allocation failure on one rank, with every other rank fine."""
    if hvd.rank() != on_rank:
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (vm_size() + headroom, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _ones(megabytes, dtype=tf.float32):
    """About `megabytes` MiB of ones, 1024 elements a row, rows a multiple of every size used."""
    rows = megabytes * MIB // (1024 * tf.as_dtype(dtype).size) // 6 * 6
    return tf.ones([rows, 1024], dtype)


# op -> (input, call). With 40 MiB left on the last rank, the memory the
# engine allocates itself cannot be had there: a fused batch's scratch, a
# prescaled copy, Adasum's working buffers. (Outputs come from TensorFlow's
# allocator, which may reuse memory it already holds, and MPI's own
# temporary buffers fail the job rather than the collective: neither makes
# a dependable failure here, though outputs go through the same agreement.)
CASES = {
    # Two 24 MiB blocks a rank, fused (under the 64 MiB threshold): the scratch holds everything
    # gathered plus this rank's blocks, several times the 40 MiB headroom, so memory malloc
    # already holds cannot satisfy it (8 MiB blocks passed a full run once without failing).
    "fused_allgather": (lambda: [_ones(24), _ones(24) * 2],
                        lambda x, n: hvd.grouped_allgather(x, name=n)[0]),
    # The output fits; the prescaled copy of the whole input does not.
    "reducescatter_prescaled": (lambda: _ones(64), lambda x, n: hvd.reducescatter(
        x, op=hvd.Sum, prescale_factor=0.5, name=n)),
    # float16 Adasum works in float32: 64 MiB beside a 32 MiB output.
    "adasum": (lambda: _ones(32, tf.float16), lambda x, n: hvd.allreduce(x, op=hvd.Adasum, name=n)),
}


@pytest.fixture
def fresh_engine():
    """A new engine, so no scratch kept from an earlier collective covers the case's needs."""
    hvd.shutdown()
    hvd.init()


@pytest.mark.parametrize("op", sorted(CASES))
def test_one_rank_out_of_memory_fails_the_collective_on_every_rank(op, fresh_engine):
    make, call = CASES[op]
    x = make()
    if op == "adasum" and hvd.size() & (hvd.size() - 1):
        # No Adasum to run out of memory in: it is refused on every rank
        # before anything is allocated, and the engine goes on.
        with pytest.raises(NotImplementedError, match="power-of-two number of ranks"):
            call(x, "oom_adasum")
        assert_engine_works("after_oom_adasum")
        return
    last = hvd.size() - 1
    name = "oom_" + op
    with address_space_left(40 * MIB, on_rank=last):
        expect_error(tf.errors.ResourceExhaustedError, lambda: call(x, name),
                     r"of tensor '%s" % name, r"rank %d could not allocate memory" % last,
                     "no rank ran it")
    assert_engine_works("after_" + name)
    # And the same collective runs once memory is there.
    assert call(x, name).shape[0] > 0


@pytest.fixture
def small_fusion_threshold():
    """The engine restarted with a 1 MiB fusion threshold (a 2 MiB scratch
    bound) and a process set of ranks 0 and 1; the default engine after."""
    hvd.shutdown()
    os.environ["TF_RING_FUSION_THRESHOLD"] = str(MIB)
    pair = hvd.ProcessSet([0, 1])
    hvd.init(process_sets=[pair])
    yield pair
    hvd.shutdown()
    del os.environ["TF_RING_FUSION_THRESHOLD"]
    hvd.init()


def test_scratch_returns_to_its_bound_after_a_large_reducescatter(small_fusion_threshold):
    bound = 2 * MIB
    for ps in (hvd.global_process_set, small_fusion_threshold):
        if not ps.included():
            continue
        members, me = ps.ranks, ps.rank()

        def reducescatter(rows, prescale, tag):
            # Small integers in float32: sums and halves are exact in any order.
            inputs = [a.astype(np.float32) for a in all_inputs((rows, 1024), tf.int32, seed=7)]
            x = tf.constant(inputs[members[me]])
            got = hvd.reducescatter(x, op=hvd.Sum, prescale_factor=prescale, process_set=ps,
                                    name="scratch.%s.%d" % (tag, ps.size()))
            total = prescale * np.sum([inputs[r] for r in members], axis=0)
            rows_of = [rows // ps.size() + (r < rows % ps.size()) for r in range(ps.size())]
            start = sum(rows_of[:me])
            np.testing.assert_array_equal(got.numpy(), total[start:start + rows_of[me]])
            return hvd.stats(process_set=ps)["scratch_bytes"]

        # 256 KiB: without a prescale MPI reads the input (no copy, no scratch);
        # with one, the copy stays in scratch for the next collective.
        assert reducescatter(64, 1.0, "plain") == 0
        assert reducescatter(64, 0.5, "small") == 256 * 1024
        # 8 MiB, four times the bound: the copy is given back at once.
        assert reducescatter(2048, 0.5, "large") <= bound
    hvd.barrier()  # a rank outside the pair waits before the fixture's shutdown
