"""The launcher's observability flags on real 2-rank jobs: the timeline file,
its summary, autotune's CSV and log line, and a timeline that stays valid
JSON when the job is killed mid-run."""
import csv
import json
import os
import re
import signal
import subprocess
import sys
import time

from conftest import REPO, tfringrun_cmd, run_under_launcher

JOB = os.path.join(REPO, "tests", "jobs", "observed_training.py")
FAST_AUTOTUNE = {"TF_RING_AUTOTUNE_WARMUP_SAMPLES": "0", "TF_RING_AUTOTUNE_SAMPLES_PER_TRIAL": "1",
                 "TF_RING_AUTOTUNE_CYCLES_PER_SAMPLE": "3"}


def test_timeline_and_autotune_flags_end_to_end(tmp_path):
    timeline = tmp_path / "out.json"
    trials = tmp_path / "trials.csv"
    result = run_under_launcher(
        2, ["--timeline-filename", str(timeline), "--timeline-mark-cycles", "--autotune",
            "--autotune-log-file", str(trials), sys.executable, JOB],
        env=FAST_AUTOTUNE, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    # Rank 0 logs the choice whatever the log level.
    assert "autotune settled after 10 trials" in result.stderr
    finals = sorted(l for l in result.stdout.splitlines() if l.startswith("rank "))
    assert len(finals) == 2 and finals[0].split(":")[1] == finals[1].split(":")[1], finals
    assert finals[0].split()[2] == "settled"
    rows = list(csv.DictReader(open(trials)))
    assert [r["kind"] for r in rows].count("trial") == 10 and rows[-1]["kind"] == "best"
    best = rows[-1]
    assert finals[0].split()[3] == best["fusion_threshold_bytes"]

    events = json.load(open(timeline))
    names = {e["name"] for e in events}
    assert {"QUEUE", "NEGOTIATE", "ALLREDUCE", "CYCLE"} <= names
    rows_named = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert any(n.startswith("grads") for n in rows_named) and "done" in rows_named

    summary = subprocess.run([sys.executable, "-m", "tf_ring.timeline", "summarize", str(timeline),
                              "--plot", str(tmp_path / "plot.png")],
                             capture_output=True, text=True, timeout=120)
    assert summary.returncode == 0, summary.stderr
    assert "NEGOTIATE" in summary.stdout and "ALLREDUCE" in summary.stdout
    assert (tmp_path / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_timeline_is_valid_json_after_the_job_is_killed(tmp_path):
    timeline = tmp_path / "killed.json"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.Popen(tfringrun_cmd(2, "--timeline-filename", str(timeline), sys.executable,
                                          JOB, "--forever"),
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:  # wait until training is under way
            line = proc.stdout.readline()
            if "running" in line or proc.poll() is not None:
                break
        assert proc.poll() is None, proc.stderr.read()[-4000:]
        deadline = time.time() + 60  # until the writer has flushed enough to check
        while time.time() < deadline and (
                not timeline.exists() or timeline.read_text().count('"ALLREDUCE"') <= 20):
            time.sleep(0.1)
    finally:
        # Kill everything at once, as a crashed node or an OOM killer would.
        subprocess.run(["pkill", "-KILL", "-s", str(proc.pid)], check=False)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    events = json.load(open(timeline))  # no stop_timeline(), no clean exit
    assert sum(1 for e in events if e["name"] == "ALLREDUCE") > 20


def test_log_level_applies_to_engine_and_python_alike():
    script = ("import tensorflow as tf, tf_ring as hvd; hvd.init(); "
              "hvd.allreduce(tf.ones([2]), name='logged'); hvd.join()")
    line = r"^\[\d\d:\d\d:\d\d\.\d{3} tf_ring rank %d %s\] "
    verbose = run_under_launcher(2, ["--log-level", "trace", sys.executable, "-c", script],
                                 timeout=180)
    assert verbose.returncode == 0, verbose.stderr[-4000:]
    lines = verbose.stderr.splitlines()
    for rank in (0, 1):
        # Python side (init), engine side (start, negotiation, each collective).
        for level, text in (("INFO", "initialized: rank %d of 2" % rank),
                            ("INFO", "engine started: rank %d of 2" % rank),
                            ("DEBUG", "negotiating allreduce of tensor 'logged'"),
                            ("TRACE", "allreduce of 1 tensor(s): logged")):
            pattern = re.compile(line % (rank, level) + ".*" + re.escape(text))
            assert any(pattern.search(l) for l in lines), (rank, level, text)
    quiet = run_under_launcher(2, [sys.executable, "-c", script], timeout=180)
    assert quiet.returncode == 0, quiet.stderr[-4000:]
    assert not re.search(r"tf_ring rank \d (INFO|DEBUG|TRACE)\]", quiet.stderr)
