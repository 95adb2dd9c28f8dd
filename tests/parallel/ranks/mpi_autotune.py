"""Autotune: rank 0 tries fusion thresholds and cycle times, every rank
switches at the same engine cycle, and all settle on the same values,
which rank 0's CSV log names as the best trial."""
import csv
import os
import tempfile

import tensorflow as tf

import tf_ring as hvd
from helpers import check_on_root

SETTINGS = {"TF_RING_AUTOTUNE": "1", "TF_RING_AUTOTUNE_WARMUP_SAMPLES": "0",
            "TF_RING_AUTOTUNE_SAMPLES_PER_TRIAL": "2", "TF_RING_AUTOTUNE_CYCLES_PER_SAMPLE": "3"}
TRIALS = 6 + 4  # six fusion thresholds, then four more cycle times


def restart_engine(env):
    hvd.shutdown()
    os.environ.update(env)
    hvd.init()


def test_autotune_settles_on_the_same_values_everywhere():
    log_dir = hvd.broadcast_object(tempfile.mkdtemp() if hvd.rank() == 0 else None, root_rank=0,
                                   name="autotune_dir")
    log_path = os.path.join(log_dir, "autotune.csv")
    restart_engine(dict(SETTINGS, TF_RING_AUTOTUNE_LOG=log_path))
    try:
        grads = [tf.ones([2000 * (i + 1)]) for i in range(8)]

        @tf.function
        def step():
            return hvd.grouped_allreduce(grads, name="at_grads")

        assert hvd.engine_params()["autotune"] == "tuning"
        for steps in range(5000):
            step()
            settled = 1 if hvd.engine_params()["autotune"] == "settled" else 0
            # Agree on stopping, since ranks may learn it a cycle apart.
            if int(hvd.allreduce(tf.constant(settled), op=hvd.Min, name="at_done")) == 1:
                break
        params = hvd.engine_params()
        assert params["autotune"] == "settled", (steps, params)
        everyone = hvd.allgather_object(params, name="at_params")
        # The same values on every rank, switched at the same cycles.
        assert all(p == everyone[0] for p in everyone), everyone
        history = params["history"]
        assert len(history) == TRIALS + 1  # first trial, nine more, then the best
        assert history[0][0] == 1  # every rank switched right after cycle 1
        assert [c for c, _, _ in history] == sorted(c for c, _, _ in history)
        final = (params["fusion_threshold"], params["cycle_time_ms"])
        assert final == history[-1][1:]

        def check_csv():
            with open(log_path) as f:
                rows = list(csv.DictReader(f))
            trials = [r for r in rows if r["kind"] == "trial"]
            best = [r for r in rows if r["kind"] == "best"]
            assert len(trials) == TRIALS and len(best) == 1
            top = max(trials, key=lambda r: float(r["bytes_per_second"]))
            assert int(best[0]["fusion_threshold_bytes"]) == final[0] == int(top["fusion_threshold_bytes"])
            assert abs(float(best[0]["cycle_time_ms"]) - final[1]) < 1e-9
            # The trials are the ones history announced, in the same order.
            assert [(int(r["fusion_threshold_bytes"]), float(r["cycle_time_ms"])) for r in trials] == \
                [h[1:] for h in history[:TRIALS]]

        check_on_root(check_csv, "at_check_csv")
        # Training still gives correct sums under the chosen values.
        out = hvd.grouped_allreduce(grads, op=hvd.Sum, name="at_check")
        assert float(out[3][0]) == float(hvd.size())
    finally:
        for key in list(SETTINGS) + ["TF_RING_AUTOTUNE_LOG"]:
            os.environ.pop(key, None)
        restart_engine({})
        assert hvd.engine_params()["autotune"] == "off"


def test_autotune_scores_the_traffic_of_process_sets():
    """All gradient traffic runs in a process set of every rank; the only
    global collective is a 4-byte vote. The trials' bytes per second must
    count the set's 288 KB a step, not only the vote."""
    log_dir = hvd.broadcast_object(tempfile.mkdtemp() if hvd.rank() == 0 else None, root_rank=0,
                                   name="autotune_set_dir")
    log_path = os.path.join(log_dir, "autotune.csv")
    everyone = hvd.ProcessSet(list(range(hvd.size())))
    hvd.shutdown()
    os.environ.update(dict(SETTINGS, TF_RING_AUTOTUNE_LOG=log_path))
    hvd.init(process_sets=[everyone])
    try:
        grads = [tf.ones([2000 * (i + 1)]) for i in range(8)]  # 288 KB a step

        @tf.function
        def step():
            return hvd.grouped_allreduce(grads, op=hvd.Sum, process_set=everyone, name="ats_grads")

        for _ in range(5000):
            out = step()
            settled = 1 if hvd.engine_params()["autotune"] == "settled" else 0
            if int(hvd.allreduce(tf.constant(settled), op=hvd.Min, name="ats_done")) == 1:
                break
        assert hvd.engine_params()["autotune"] == "settled"
        assert float(out[7][0]) == float(hvd.size())

        def check_csv():
            with open(log_path) as f:
                trials = [r for r in csv.DictReader(f) if r["kind"] == "trial"]
            assert len(trials) == TRIALS
            # The vote alone moves 4 bytes a step (well under 1e4 B/s); the
            # set's gradients move 288 KB a step, over 1e5 B/s even on a
            # step of a second.
            slowest = min(float(r["bytes_per_second"]) for r in trials)
            assert slowest > 1e5, trials

        check_on_root(check_csv, "ats_check_csv")
    finally:
        for key in list(SETTINGS) + ["TF_RING_AUTOTUNE_LOG"]:
            os.environ.pop(key, None)
        restart_engine({})
