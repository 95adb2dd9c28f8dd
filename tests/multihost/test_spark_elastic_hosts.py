"""tf_ring.spark.run_elastic on a Spark standalone cluster whose 2 workers
(1 core each) run in simulated hosts: the test kills the host of rank 1
mid-run (its worker, executor, task, daemon and rank at once). The job must
go on with the other host's slot from its last commit, not from step 0,
and return the last world's result: one rank, every step counted once."""
import json
import os
import re
import subprocess
import sys

import pytest

from multihost.simulated_hosts import SimulatedHosts, namespaces_available

pytest.importorskip("pyspark", reason="pyspark is in the [test] extra: pip install -e .[test]")
from multihost.spark_standalone import SparkStandalone  # noqa: E402 - needs pyspark

AVAILABLE, WHY = namespaces_available()
pytestmark = pytest.mark.skipif(not AVAILABLE, reason=WHY)

DRIVER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "spark_jobs",
                      "elastic_on_spark.py")
STEPS, KILL_AT = 30, 6


def test_losing_a_host_continues_from_the_last_commit(tmp_path):
    with SimulatedHosts(2) as hosts, \
            SparkStandalone(hosts, cores=[1, 1], log_dir=str(tmp_path)) as spark:
        driver = subprocess.Popen(
            [sys.executable, DRIVER, spark.master_url, "--driver-host", spark.address,
             "--nics", hosts.subnet, "--steps", str(STEPS)],
            stdout=subprocess.PIPE, stderr=open(str(tmp_path / "driver.err"), "w"), text=True)
        killed, lines = None, []
        try:
            for line in driver.stdout:
                lines.append(line)
                step = re.match(r"STEP rank=1 size=2 step=(\d+) host=(\S+)", line)
                if step and killed is None and int(step.group(1)) >= KILL_AT:
                    killed = step.group(2)
                    hosts.kill_host(killed)
            driver.wait(timeout=60)
        finally:
            if driver.poll() is None:
                driver.kill()
        err = open(str(tmp_path / "driver.err")).read()
        assert driver.returncode == 0, "".join(lines)[-3000:] + err[-6000:]
    assert killed in hosts.hostnames, "rank 1 never reached step %d" % KILL_AT
    survivor = [h for h in hosts.hostnames if h != killed][0]
    result = [l for l in lines if l.startswith("RESULTS ")]
    (last,) = json.loads(result[0][len("RESULTS "):])
    assert (last["rank"], last["size"], last["host"]) == (0, 1, survivor)
    assert last["step"] == STEPS and last["total"] == sum(range(STEPS))
    assert last["world"] >= 1, "the job was never relaunched"
    assert last["resumed_at"] >= KILL_AT - 1, "resumed at %d, not from the last commit" % (
        last["resumed_at"])
