"""tf_ring.spark.run on a Spark local-cluster: two executor JVMs, a barrier
stage, Keras 3 model.fit on 2 and 3 ranks from different random starts.
The ranks' own weights (sent back as their return values) must be equal,
and a rank that raises must fail both the call and the Spark job, naming
it. Then tf_ring.spark.keras.KerasEstimator fits and transforms a digits
DataFrame on 2 and 3 ranks (tests/spark_jobs/estimator_runs.py). The
driver runs in its own process (tests/spark_jobs/digits_on_spark.py) so
this one holds no JVM. Simulated hosts: tests/multihost/test_spark_hosts.py."""
import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

pytest.importorskip("pyspark", reason="pyspark is in the [test] extra: pip install -e .[test]")
if shutil.which("java") is None:
    pytest.skip("Spark needs a Java runtime (17 or newer) on PATH", allow_module_level=True)

DRIVER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "spark_jobs",
                      "digits_on_spark.py")


def run_spark_driver(master, ranks, extra=(), env=None, timeout=900):
    """Runs the driver script; returns ({run: [json lines]}, stderr)."""
    proc = subprocess.run([sys.executable, DRIVER, master, ranks] + list(extra), env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=timeout)
    lines = [json.loads(l) for l in proc.stdout.splitlines() if l.startswith("{")]
    assert proc.returncode == 0, "driver failed (%d):\n%s" % (proc.returncode, proc.stderr[-6000:])
    runs = {}
    for line in lines:
        runs.setdefault(line.get("run", "session"), []).append(line)
    return runs, proc.stderr


def check_digits_run(run, ranks, hosts):
    assert run["ranks"] == list(range(ranks))  # results in rank order
    assert run["sizes"] == [ranks] * ranks
    assert run["starts_differ"], "every rank should start from its own random weights"
    assert run["max_weight_difference"] == 0.0, "ranks ended with different weights"
    assert min(run["accuracy"]) > 0.8, run["accuracy"]
    assert run["hosts"] == hosts
    assert run["local_sizes"] == [hosts.count(h) for h in hosts]


def check_failed_run(run, stderr):
    assert run["failed_ranks"] == [1]
    assert run["raised"].startswith("tf_ring.spark.run: rank 1 failed (of 2 ranks)")
    assert "ValueError: rank 1 refuses to train" in run["raised"]
    # The Spark job failed with the rank's error too (the executor's task error).
    assert "RuntimeError: tf_ring.spark.run: rank 1 failed" in stderr


@pytest.fixture(scope="module")
def local_cluster_runs(tmp_path_factory):
    store = str(tmp_path_factory.mktemp("estimator-store"))
    return run_spark_driver("local-cluster[2,2,1024]", "2,3",
                            extra=["--estimator", "2,3", "--store", store])


@pytest.mark.parametrize("ranks", [2, 3])
def test_keras_fit_on_a_local_cluster(local_cluster_runs, ranks):
    runs, _ = local_cluster_runs
    run = [r for r in runs["digits"] if r["num_proc"] == ranks][0]
    # One machine: every rank on it, sharing memory, whichever executor ran its task.
    check_digits_run(run, ranks, [socket.gethostname()] * ranks)


def test_a_failing_rank_fails_the_call_and_the_spark_job(local_cluster_runs):
    runs, stderr = local_cluster_runs
    check_failed_run(runs["fails"][0], stderr)


@pytest.mark.parametrize("ranks", [2, 3])
def test_keras_estimator_fits_and_transforms_a_dataframe(local_cluster_runs, ranks):
    """KerasEstimator.fit on the digits DataFrame (pixels as an ML vector,
    validation rows flagged by a column) with a model holding a
    BatchNormalization layer: each rank read its own Parquet file, together
    every training row once, within a row of each other; the ranks ended
    with equal trainable weights (fit raises otherwise; the moving
    statistics are each rank's own); the model learnt; transform's
    predictions, made in Spark tasks, are the driver's own (rank 0's model,
    its moving statistics included)."""
    runs, _ = local_cluster_runs
    run = [r for r in runs["estimator"] if r["num_proc"] == ranks][0]
    rows = run["rows_per_rank"]
    assert len(rows) == ranks and sum(rows) == run["train_rows"], run
    assert max(rows) - min(rows) <= 1, rows
    assert all(run["epochs"].get(k) == 4 for k in ("loss", "accuracy", "val_loss",
                                                   "val_accuracy")), run
    assert run["loss_fell"], run
    assert run["test_accuracy"] > 0.85, run
    assert run["transform_rows"] == 300
    assert run["transform_max_difference"] < 1e-5, run
    # The training data is the user's: a private run directory, private files.
    assert run["store_modes"] == {"run dir": ["700"], "dirs": ["700"], "files": ["600"]}, run


@pytest.mark.parametrize("ranks", [2, 3])
def test_too_few_validation_rows_are_refused_saying_so(local_cluster_runs, ranks):
    """Issue 49: a validation column true on fewer rows than ranks (here
    ranks - 1) left a rank's validation file empty, and every rank failed
    blaming a column ("'features' has 0 values per row"). fit refuses it on
    the driver, naming the column, the counts and the fix."""
    runs, _ = local_cluster_runs
    run = [r for r in runs["few_validation_rows"] if r["num_proc"] == ranks][0]
    assert run["raised"] == (
        "ValueError: KerasEstimator: validation='is_val' gives %d validation rows for %d ranks; "
        "each rank needs at least one. Flag (or hold out) at least %d rows, or pass "
        "validation=None" % (ranks - 1, ranks, ranks)), run
