"""The engine thread keeps to a CPU of its own during a large shared-memory
allreduce, and roams again afterwards (cc/common/transport/cpu_placement.h).

Where each local rank keeps is computed here independently from every
rank's affinity mask: the local_rank-th CPU of their union, where the ranks
roam the same CPUs, each can have one and there is more than one rank;
nowhere otherwise (bound ranks, more ranks than CPUs, or
TF_RING_ENGINE_AFFINITY=0). A thread of this test polls every thread's
allowed CPUs (/proc/self/task/*/status) while the allreduces run: the
engine's must be seen on exactly that CPU where one is expected, and no
thread's may differ from the process's own mask otherwise, or afterwards.
Results are compared exactly with every rank's input combined in rank order.
"""
import os
import threading

import numpy as np
import pytest
import tensorflow as tf

import tf_ring as hvd
from helpers import all_inputs, rank_order

AREA = 4 << 20  # bytes: the default chunk, one area of the segment
PROCESS_MASK = frozenset(os.sched_getaffinity(0))


def expected_cpu(affinity_setting):
    """This rank's CPU during a large allreduce, or None (see the docstring)."""
    masks = [frozenset(m) for m in hvd.allgather_object(sorted(PROCESS_MASK), name="home_masks")]
    if affinity_setting == "0" or hvd.local_size() < 2:
        return None
    union = sorted(frozenset().union(*masks))
    if any(m != frozenset(union) for m in masks) or hvd.local_size() > len(union):
        return None
    return union[hvd.local_rank()]


def parse_cpu_list(text):
    cpus = set()
    for part in text.strip().split(","):
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return frozenset(cpus)


def thread_masks():
    """{thread id: its allowed CPUs}, for every thread of this process now."""
    masks = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/status" % tid) as f:
                for line in f:
                    if line.startswith("Cpus_allowed_list:"):
                        masks[int(tid)] = parse_cpu_list(line.split(":", 1)[1])
        except OSError:
            pass  # the thread ended meanwhile
    return masks


class MaskWatcher:
    """Every mask other than the process's that any thread had while it ran."""

    def __init__(self):
        self.seen = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self):
        # Every half millisecond: an allreduce of 12 MB lasts several, and a
        # tighter loop would take the GIL and a core from the ranks.
        while not self._stop.wait(0.0005):
            self.seen.update(m for m in thread_masks().values() if m != PROCESS_MASK)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


@pytest.fixture(scope="module", params=["default", "0"], autouse=True)
def affinity(request):
    if hvd.local_size() != hvd.size():
        pytest.skip("the shared-memory allreduce needs every rank on one host")
    hvd.shutdown()
    if request.param == "default":
        os.environ.pop("TF_RING_ENGINE_AFFINITY", None)
    else:
        os.environ["TF_RING_ENGINE_AFFINITY"] = request.param
    hvd.init()
    yield request.param
    os.environ.pop("TF_RING_ENGINE_AFFINITY", None)  # conftest restarts the engine


def large_allreduces(count, elements=3 * AREA // 4 + 5):
    inputs = all_inputs([elements], tf.float32, seed=elements % 89)
    want = rank_order(inputs, hvd.Sum)
    for i in range(count):
        out = hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=hvd.Sum, name="home_large").numpy()
        np.testing.assert_array_equal(out, want, err_msg="allreduce %d" % i)


def test_large_allreduces_keep_the_engine_thread_on_its_cpu(affinity):
    cpu = expected_cpu(affinity)
    hvd.reset_stats()
    with MaskWatcher() as watcher:
        # Until the watcher has seen the kept mask, at most 40; where none
        # is expected, 8 give it as many chances to see a thread moved.
        ran, most = 0, 40 if cpu is not None else 8
        while ran < most and not (cpu is not None and frozenset([cpu]) in watcher.seen):
            large_allreduces(1)
            ran += 1
    kept = hvd.stats()["shm_kept_on_cpu_batches"]
    if cpu is None:
        assert watcher.seen == set(), "a thread left the process's CPUs %s" % sorted(PROCESS_MASK)
        assert kept == 0
    else:
        assert watcher.seen == {frozenset([cpu])}, "expected only CPU %d, saw %s" % (cpu, watcher.seen)
        assert kept == ran


def test_every_large_allreduce_is_counted_and_small_ones_are_not(affinity):
    cpu = expected_cpu(affinity)
    hvd.reset_stats()
    large_allreduces(3)
    small = all_inputs([AREA // 4], tf.float32, seed=3)  # exactly one area: no hand-offs to keep apart
    out = hvd.allreduce(tf.constant(small[hvd.rank()]), op=hvd.Sum, name="home_small").numpy()
    np.testing.assert_array_equal(out, rank_order(small, hvd.Sum))
    assert hvd.stats()["shm_kept_on_cpu_batches"] == (0 if cpu is None else 3)


def test_a_grouped_batch_larger_than_an_area_is_kept_once(affinity):
    cpu = expected_cpu(affinity)
    sizes = [AREA // 8 + 3, AREA // 4, 7]
    inputs = [all_inputs([n], tf.float32, seed=i) for i, n in enumerate(sizes)]
    hvd.reset_stats()
    outs = hvd.grouped_allreduce([tf.constant(x[hvd.rank()]) for x in inputs], op=hvd.Sum, name="home_group")
    for got, x in zip(outs, inputs):
        np.testing.assert_array_equal(got.numpy(), rank_order(x, hvd.Sum))
    assert hvd.stats()["shm_kept_on_cpu_batches"] == (0 if cpu is None else 1)


def test_every_thread_roams_again_afterwards(affinity):
    large_allreduces(2)
    hvd.barrier(name="home_after")
    moved = {tid: sorted(m) for tid, m in thread_masks().items() if m != PROCESS_MASK}
    assert moved == {}, "threads still kept: %s" % moved
