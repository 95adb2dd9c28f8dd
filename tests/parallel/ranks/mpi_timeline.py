"""The timeline: rank 0 writes a Chrome trace whose events cover every tensor
and phase, with timestamps in phase order, and which is valid JSON at every
flush, not only after stop_timeline()."""
import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import tensorflow as tf

import tf_ring as hvd
from helpers import check_on_root, timeline_events

COLLECTIVE_PHASES = {"ALLREDUCE", "ALLGATHER", "BROADCAST", "ALLTOALL", "REDUCESCATTER"}


def shared_path(name):
    """One path for every rank (rank 0's temporary directory)."""
    folder = hvd.broadcast_object(tempfile.mkdtemp() if hvd.rank() == 0 else None, root_rank=0,
                                  name="timeline_dir_" + name)
    return os.path.join(folder, name + ".json")


def check_phase_order(events):
    """Per tensor row, sorted by start: each phase starts after the previous
    one ended (1 µs slack for rounding), and none has a negative duration."""
    events = sorted(events, key=lambda e: (e["ts"], e["name"] != "QUEUE"))
    for e in events:
        assert e["dur"] >= 0, e
    for before, after in zip(events, events[1:]):
        assert after["ts"] >= before["ts"] + before["dur"] - 1.0, (before, after)


def run_workload(size):
    grads = [tf.ones([64 * (i + 1)]) for i in range(4)]

    @tf.function
    def step():
        return hvd.grouped_allreduce(grads, name="tl_grads")

    for _ in range(3):
        step()
    hvd.allgather(tf.ones([hvd.rank() + 1, 2]), name="tl_gather")
    hvd.broadcast(tf.ones([3]), root_rank=0, name="tl_bcast")
    hvd.alltoall(tf.ones([size, 2]), name="tl_alltoall")
    hvd.reducescatter(tf.ones([size, 2]), name="tl_reducescatter")


def submit_last_rank_late(name, delay):
    """Allreduces `name`, the last rank at least `delay` s after every other
    rank's engine has taken it (told by `name`.ready, which they run after)."""
    late = hvd.rank() == hvd.size() - 1
    if late:
        hvd.allreduce(tf.ones([1]), name=name + ".ready")
        time.sleep(delay)
        hvd.allreduce(tf.ones([2]), name=name)
        return
    taken = lambda: hvd.stats()["cache_hits"] + hvd.stats()["cache_misses"]  # noqa: E731
    before = taken()
    thread = threading.Thread(target=lambda: hvd.allreduce(tf.ones([2]), name=name))
    thread.start()
    deadline = time.monotonic() + 60
    while taken() == before and time.monotonic() < deadline:
        time.sleep(0.005)
    hvd.allreduce(tf.ones([1]), name=name + ".ready")
    thread.join(timeout=120)
    assert not thread.is_alive()


def test_every_tensor_gets_queue_negotiate_and_collective_phases():
    size = hvd.size()
    path = shared_path("phases")
    hvd.start_timeline(path, mark_cycles=True)
    run_workload(size)
    # The last rank comes late: rank 0 must record that it waited for it.
    submit_last_rank_late("tl_late", 0.3)
    hvd.stop_timeline()
    check_on_root(lambda: check_phases_file(path, size), "tl_check_phases")


def check_phases_file(path, size):
    events, by_tensor = timeline_events(path)
    expected = {"tl_gather": "ALLGATHER", "tl_bcast": "BROADCAST", "tl_alltoall": "ALLTOALL",
                "tl_reducescatter": "REDUCESCATTER", "tl_late": "ALLREDUCE"}
    grad_rows = [name for name in by_tensor if name.startswith("tl_grads")]
    assert len(grad_rows) == 4, sorted(by_tensor)
    for name in grad_rows:
        expected[name] = "ALLREDUCE"
    for name, op in expected.items():
        phases = [e["name"] for e in by_tensor[name]]
        for phase in ("QUEUE", "NEGOTIATE", op):
            assert phase in phases, (name, phases)
        check_phase_order(by_tensor[name])
        for e in by_tensor[name]:
            if e["name"] in COLLECTIVE_PHASES:
                assert e["args"]["bytes"] >= 0 and e["args"]["tensors_in_batch"] >= 1
                assert e["args"]["transport"] in ("shm", "mpi")
    # The gradients ran 3 times; after the first, from the response cache.
    vias = [e["args"]["via"] for e in by_tensor[grad_rows[0]] if e["name"] == "NEGOTIATE"]
    assert vias[0] == "coordinator" and vias.count("cache") >= 1, vias
    late = [e for e in by_tensor["tl_late"] if e["name"] == "NEGOTIATE"][0]
    assert late["args"]["via"] == "coordinator"
    # The sleeper arrives last; with 3 ranks the other two may or may not
    # have reached rank 0 in the same negotiation, so only the tail is fixed.
    assert late["args"]["waited_for"][-1] == size - 1, late
    assert late["args"]["arrived"][-1] == size - 1, late
    assert sorted(late["args"]["arrived"]) == list(range(size))
    assert late["dur"] >= 200_000  # µs: it waited for the sleeping rank
    cycles = [e for e in events if e["name"] == "CYCLE"]
    assert cycles and all(e["ph"] == "i" for e in cycles)


def test_fused_mpi_path_shows_fusion_buffer_copies():
    # Restart the engine without the shared-memory transport: fused batches
    # are then packed into a buffer, reduced by MPI and unpacked.
    hvd.shutdown()
    os.environ["TF_RING_SHM"] = "0"
    try:
        hvd.init()
        path = shared_path("fusion")
        hvd.start_timeline(path)
        grads = [tf.ones([32]) * (i + 1) for i in range(3)]
        out = hvd.grouped_allreduce(grads, op=hvd.Sum, name="fz")
        np.testing.assert_allclose(out[2].numpy(), np.full(32, 3.0 * hvd.size()))
        hvd.stop_timeline()

        def check():
            _, by_tensor = timeline_events(path)
            for i in range(3):
                rows = [n for n in by_tensor if n.startswith("fz")]
                phases = [e["name"] for e in by_tensor[rows[i]]]
                assert phases[-3:] == ["MEMCPY_IN_FUSION_BUFFER", "ALLREDUCE",
                                       "MEMCPY_OUT_FUSION_BUFFER"], phases
                collective = [e for e in by_tensor[rows[i]] if e["name"] == "ALLREDUCE"][0]
                assert collective["args"]["tensors_in_batch"] == 3
                assert collective["args"]["transport"] == "mpi"
                check_phase_order(by_tensor[rows[i]])

        check_on_root(check, "tl_check_fusion")
    finally:
        hvd.shutdown()
        del os.environ["TF_RING_SHM"]
        hvd.init()


def test_file_is_valid_json_while_still_recording_and_summarizes():
    path = shared_path("live")
    hvd.start_timeline(path)
    for i in range(3):
        hvd.allreduce(tf.ones([4]), name="live_%d" % i)

    def check_live():
        deadline = time.monotonic() + 60  # until the writer has flushed them
        while True:
            _, by_tensor = timeline_events(path)  # no stop_timeline() yet
            if {"live_0", "live_1", "live_2"} <= set(by_tensor) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert {"live_0", "live_1", "live_2"} <= set(by_tensor)

    check_on_root(check_live, "tl_check_live")
    hvd.stop_timeline()

    def check_summary():
        result = subprocess.run([sys.executable, "-m", "tf_ring.timeline", "summarize", path],
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        assert "NEGOTIATE" in result.stdout and "ALLREDUCE" in result.stdout

    check_on_root(check_summary, "tl_check_summary")
