"""tf_ring.ray.RayExecutor on a Ray cluster of simulated hosts: the head
node (no CPUs for workers) and the driver in simhost2, worker nodes of 2
and 1 CPUs in simhost0 and simhost1, joined with Ray 2.60's token
authentication. 3 workers of 1 CPU must land 2 + 1 on the worker hosts:
ranks report those hosts' names and local sizes, and Keras 3 digits
training from different starts ends with equal weights; num_hosts=2 puts
one rank on each worker host, and digits trains on those 2 ranks across
the 2 hosts the same way. The cluster starts
once for the module; one driver does every run."""
import collections
import json
import os
import re
import secrets
import subprocess
import sys
import time

import pytest

from conftest import REPO
from multihost.simulated_hosts import SimulatedHosts, namespaces_available

pytest.importorskip("ray", reason="tf_ring.ray's tests need Ray (pip install 'ray==2.60.0')")
AVAILABLE, WHY = namespaces_available()
pytestmark = pytest.mark.skipif(not AVAILABLE, reason=WHY)

RAY = os.path.join(os.path.dirname(sys.executable), "ray")
DRIVER = os.path.join(REPO, "tests", "ray_jobs", "digits_on_ray.py")
PORT = 6379
WORKER_CPUS = {"simhost0": 2, "simhost1": 1}


class Cluster:
    def __init__(self, hosts, env, head, seconds):
        self.hosts, self.env, self.head, self.start_seconds = hosts, env, head, seconds

    @property
    def address(self):
        return "%s:%d" % (self.hosts.addresses[self.head], PORT)

    def run_on(self, host, command, timeout):
        result = self.hosts.run_on(host, command, env=self.env, capture_output=True, text=True,
                                   timeout=timeout)
        if result.returncode != 0:
            pytest.fail("%s failed on %s (exit %d)\n--- stdout ---\n%s\n--- stderr ---\n%s" % (
                command, host, result.returncode, result.stdout[-5000:], result.stderr[-12000:]))
        return result


@pytest.fixture(scope="module")
def cluster():
    with SimulatedHosts(3) as hosts:
        # Every node and the driver share one token (and nothing is written
        # to ~/.ray); the usual way is `ray get-auth-token` on the head.
        env = dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32),
                   RAY_USAGE_STATS_ENABLED="0", TF_CPP_MIN_LOG_LEVEL="2")
        head = hosts.hostnames[2]
        made = Cluster(hosts, env, head, None)
        common = "--include-dashboard=false --disable-usage-stats --object-store-memory=100000000"
        started = time.monotonic()
        made.run_on(head, "%s start --head --node-ip-address=%s --port=%d --num-cpus=0 %s"
                    % (RAY, hosts.addresses[head], PORT, common), timeout=180)
        for host, cpus in WORKER_CPUS.items():
            made.run_on(host, "%s start --address=%s --node-ip-address=%s --num-cpus=%d %s"
                        % (RAY, made.address, hosts.addresses[host], cpus,
                           common.replace("--include-dashboard=false ", "")), timeout=180)
        made.start_seconds = time.monotonic() - started
        yield made  # closing the hosts kills every Ray process on them


def test_three_workers_on_two_ray_nodes(cluster):
    started = time.monotonic()
    result = cluster.run_on(cluster.head, "%s %s %s 3 --nics %s --digits-only --num-hosts 2" % (
        sys.executable, DRIVER, cluster.address, cluster.hosts.subnet), timeout=480)
    steps = collections.defaultdict(list)
    for line in result.stdout.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            steps[record["step"]].append(record)
    print("cluster start %.1f s, driver %.1f s: %s" % (
        cluster.start_seconds, time.monotonic() - started,
        {k: [round(r.get("seconds", 0), 1) for r in v] for k, v in steps.items()}))
    addresses = cluster.hosts.addresses
    assert steps["ray.init"][0]["nodes"] == sorted(addresses.values())
    assert sorted(map(tuple, steps["start"][0]["hosts"])) == sorted(WORKER_CPUS.items())
    digits = steps["digits"][0]
    assert digits["ranks"] == [0, 1, 2] and digits["sizes"] == [3, 3, 3]
    assert collections.Counter(digits["hosts"]) == WORKER_CPUS
    assert digits["local_sizes"] == [WORKER_CPUS[h] for h in digits["hosts"]]
    # Ranks fill each host's slots in the order start() found the hosts.
    assert digits["hosts"] == [h for h, slots in steps["start"][0]["hosts"] for _ in range(slots)]
    assert digits["starts_differ"] and digits["max_weight_difference"] == 0.0
    assert min(digits["accuracy"]) > 0.8
    # num_hosts=2: one rank on each worker host, alone there; Keras digits
    # on these 2 ranks across the 2 hosts too.
    spread = steps["num_hosts"][0]["every"]
    assert [r[0] for r in spread] == [0, 1] and [r[2] for r in spread] == [1, 1]
    assert sorted(r[1] for r in spread) == sorted(WORKER_CPUS)
    two = steps["num_hosts"][0]
    assert two["ranks"] == [0, 1] and two["sizes"] == [2, 2] and two["local_sizes"] == [1, 1]
    assert sorted(two["hosts"]) == sorted(WORKER_CPUS)
    assert two["starts_differ"] and two["max_weight_difference"] == 0.0
    assert min(two["accuracy"]) > 0.8
    end = steps["end"][0]
    assert set(end["groups"]) == {"REMOVED"} and end["cpus_free"] == end["cpus"] == 3


ELASTIC_DRIVER = os.path.join(REPO, "tests", "ray_jobs", "elastic_on_ray.py")
STEPS, KILL_AT = 30, 6


def test_elastic_mode_goes_on_without_a_lost_node(cluster, tmp_path):
    """Last in this module: it kills a worker host. min_workers=1,
    max_workers=3 over nodes of 2 and 1 CPUs: 3 ranks on both hosts; the
    host without rank 0 is killed at step 6 (its raylet, agent, daemon and
    rank at once), and the job must finish on rank 0's host from its last
    commit, with every step counted once."""
    command = "%s %s %s --nics %s --steps %d" % (sys.executable, ELASTIC_DRIVER, cluster.address,
                                                 cluster.hosts.subnet, STEPS)
    err = open(str(tmp_path / "driver.err"), "w")
    driver = subprocess.Popen([cluster.hosts.agent, cluster.head, command], env=cluster.env,
                              stdout=subprocess.PIPE, stderr=err, text=True)
    hosts_of, killed, lines = {}, None, []
    try:
        for line in driver.stdout:
            lines.append(line)
            step = re.match(r"STEP rank=(\d+) size=3 step=(\d+) host=(\S+)", line)
            if step:
                hosts_of[int(step.group(1))] = step.group(3)
                if killed is None and int(step.group(2)) >= KILL_AT and len(hosts_of) == 3:
                    killed = [h for h in WORKER_CPUS if h != hosts_of[0]][0]
                    cluster.hosts.kill_host(killed)
        driver.wait(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
        err.close()
    output = "".join(lines)[-3000:] + open(str(tmp_path / "driver.err")).read()[-6000:]
    assert driver.returncode == 0, output
    assert killed is not None, "the 3 ranks never reached step %d: %s" % (KILL_AT, output)
    survivor = hosts_of[0]
    assert sorted(hosts_of.values()) == sorted(h for h, k in WORKER_CPUS.items() for _ in range(k))
    (result,) = [json.loads(l[len("RESULTS "):]) for l in lines if l.startswith("RESULTS ")]
    assert [r["rank"] for r in result] == list(range(WORKER_CPUS[survivor]))
    for last in result:
        assert (last["size"], last["host"]) == (WORKER_CPUS[survivor], survivor)
        assert last["step"] == STEPS and last["total"] == sum(range(STEPS))
        assert last["world"] >= 1, "the job was never relaunched"
        assert last["resumed_at"] >= KILL_AT - 1, "resumed at %d" % last["resumed_at"]
