"""tf_ring.spark.run on a Spark standalone cluster whose workers run in
simulated hosts (own address, hostname, /dev/shm and /tmp): ranks run on the
executors' hosts, grouped by host (3 ranks: 2 on one host, 1 on the other),
Keras 3 model.fit from different random starts ends with equal weights, and
a failing rank fails the call and the Spark job, naming it."""
import pytest

from multihost.simulated_hosts import SimulatedHosts, namespaces_available

pytest.importorskip("pyspark", reason="pyspark is in the [test] extra: pip install -e .[test]")
from multihost.spark_standalone import SparkStandalone  # noqa: E402 - needs pyspark
from integration.test_spark import check_digits_run, check_failed_run, run_spark_driver  # noqa: E402

AVAILABLE, WHY = namespaces_available()
pytestmark = pytest.mark.skipif(not AVAILABLE, reason=WHY)


@pytest.fixture(scope="module")
def standalone_runs(tmp_path_factory):
    logs = tmp_path_factory.mktemp("spark-logs")
    with SimulatedHosts(2) as hosts, SparkStandalone(hosts, cores=[2, 1], log_dir=str(logs)) as spark:
        runs, stderr = run_spark_driver(spark.master_url, "3,2", extra=[
            "--driver-host", spark.address, "--nics", hosts.subnet])
        yield runs, stderr, hosts


def test_three_ranks_on_two_hosts_as_spark_placed_them(standalone_runs):
    runs, _, hosts = standalone_runs
    run = [r for r in runs["digits"] if r["num_proc"] == 3][0]
    # 3 tasks fill both workers (2 cores + 1); ranks come host by host, in
    # the order of the hosts' first tasks.
    assert sorted(set(run["hosts"])) == hosts.hostnames
    assert sorted(run["hosts"].count(h) for h in hosts.hostnames) == [1, 2]
    assert run["hosts"][1] in (run["hosts"][0], run["hosts"][2])
    check_digits_run(run, 3, run["hosts"])


def test_two_ranks_on_the_simulated_hosts(standalone_runs):
    runs, _, hosts = standalone_runs
    run = [r for r in runs["digits"] if r["num_proc"] == 2][0]
    assert set(run["hosts"]) <= set(hosts.hostnames)
    check_digits_run(run, 2, run["hosts"])


def test_a_failing_rank_fails_the_call_and_the_spark_job(standalone_runs):
    runs, stderr, _ = standalone_runs
    check_failed_run(runs["fails"][0], stderr)
