"""tf_ring.ray.RayExecutor on a local Ray (ray.init(num_cpus=3) in a driver
process of its own, tests/ray_jobs/digits_on_ray.py): Keras 3 digits
training on 2 and then 3 workers, each rank starting from its own random
weights, must end with equal weights on every rank and a working model;
a rank that raises fails run() naming it; execute() and execute_single()
make the executable class on every rank; with (made-up) GPUs declared,
use_gpu shows the ranks every GPU of their host's bundles; num_hosts=2 on one node times out
naming the placement group; shutdown() frees what start() reserved. One driver runs everything, so
Ray starts once."""
import json
import os
import secrets
import subprocess
import sys
import time

import pytest

from conftest import MARKER_VAR, REPO, job_marker, marked_processes_left, processes_marked

pytest.importorskip("ray", reason="tf_ring.ray's tests need Ray (pip install 'ray==2.60.0')")

DRIVER = os.path.join(REPO, "tests", "ray_jobs", "digits_on_ray.py")


def run_driver(args, timeout, env=None):
    """Runs the driver; returns (its JSON lines by step, output, seconds). Kills
    whatever it started (Ray's own processes included) if it hangs or leaves
    anything behind."""
    marker = job_marker()
    # Ray 2.60 turns token authentication on for a new cluster and writes a
    # token to ~/.ray/auth_token unless it is given one: give it one.
    full_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", RAY_USAGE_STATS_ENABLED="0",
                    RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32),
                    **{MARKER_VAR: marker})
    full_env.update(env or {})
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, DRIVER] + args, cwd=REPO, env=full_env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(processes_marked(marker))
        out, _ = proc.communicate()
        pytest.fail("the Ray driver timed out after %d s\n%s" % (timeout, out[-10000:]))
    seconds = time.monotonic() - started
    left = marked_processes_left(marker, within=30)
    _kill(left)
    assert proc.returncode == 0, out[-10000:]
    assert not left, "the driver left processes behind: %s\n%s" % (left, out[-3000:])
    steps = {}
    for line in out.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            steps.setdefault(record["step"], []).append(record)
    return steps, out, seconds


def _kill(pids):
    for pid in pids:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass


def check_digits(record, workers):
    assert record["ranks"] == list(range(workers))  # results in rank order
    assert record["sizes"] == [workers] * workers
    assert record["starts_differ"]  # each rank seeded its own initial weights
    assert record["max_weight_difference"] == 0.0
    assert min(record["accuracy"]) > 0.8


def test_digits_failure_and_executables_on_local_ray():
    steps, out, seconds = run_driver(["local", "2,3", "--gpus", "2", "--num-hosts", "2"],
                                     timeout=600)
    print("driver took %.1f s: %s" % (seconds, {k: [round(r.get("seconds", 0), 1) for r in v]
                                                for k, v in steps.items()}))
    two, three = steps["digits"]
    check_digits(two, 2)
    check_digits(three, 3)
    # One node: every rank shares it.
    assert two["local_sizes"] == [2, 2] and three["local_sizes"] == [3, 3, 3]
    assert [len(s["hosts"]) for s in steps["start"]] == [1, 1]
    assert [s["hosts"][0][1] for s in steps["start"]] == [2, 3]
    fails = steps["fails"][0]
    assert fails["failed_ranks"] == [1], out[-6000:]
    assert "rank 1 failed" in fails["raised"]
    assert "ValueError: rank 1 refuses to train" in fails["raised"]
    # Counter(10, step=5).advance() on every rank, made fresh for each call.
    assert steps["execute"][0]["every"] == [[0, 15], [1, 15]]
    assert steps["execute"][0]["single"] == [0, 15]
    # use_gpu: each rank's bundle holds one GPU (the agent's, and a claim
    # actor's); both ranks of the host see both.
    gpus = steps["gpus"][0]["every"]
    assert [r[0] for r in gpus] == [0, 1]
    assert [sorted(r[1].split(",")) for r in gpus] == [["0", "1"], ["0", "1"]]
    # num_hosts=2 cannot be placed on one node: start() says so in time.
    assert "did not grant a placement group of 2 bundles {'CPU': 1} (STRICT_SPREAD) within " \
        "placement_group_timeout_s=5 s" in steps["num_hosts"][0]["raised"]
    assert steps["num_hosts"][0]["seconds"] < 30
    # shutdown() removed every placement group and freed its CPUs.
    end = steps["end"][0]
    assert set(end["groups"]) == {"REMOVED"}
    assert end["cpus_free"] == end["cpus"] == 3 and len(end["groups"]) == 4
