"""tf_ring.ray without a Ray cluster: RayExecutor's checks of its
arguments, the placement group it asks for, how bundles become hosts, and
that importing tf_ring or tf_ring.ray leaves Ray unimported."""
import os
import subprocess
import sys

import pytest

from tf_ring.plumbing import endpoints
from tf_ring.ray import RayExecutor, placement

SETTINGS = RayExecutor.create_settings()


def test_settings_keep_horovods_names_and_defaults():
    s = RayExecutor.create_settings()
    assert (s.timeout_s, s.placement_group_timeout_s, s.nics, s.ssh_identity_file,
            s.ssh_str) == (30, 100, None, None, None)
    assert RayExecutor.create_settings(nics={"eth1", "eth0"}).nics_spec == "eth0,eth1"
    assert RayExecutor.create_settings(nics="10.0.0.0/24").nics_spec == "10.0.0.0/24"


def test_num_workers_asks_for_one_packed_bundle_per_worker():
    executor = RayExecutor(SETTINGS, num_workers=3, cpus_per_worker=2)
    assert executor._bundles == [{"CPU": 2}] * 3 and executor._strategy == "PACK"
    assert executor.num_workers == 3


def test_num_hosts_asks_for_one_bundle_per_host_each_on_its_own_node():
    executor = RayExecutor(SETTINGS, num_hosts=2, num_workers_per_host=4, cpus_per_worker=1,
                           use_gpu=True)
    assert executor._bundles == [{"CPU": 4, "GPU": 4}] * 2
    assert executor._strategy == "STRICT_SPREAD" and executor.num_workers == 8
    gpus_only = RayExecutor(SETTINGS, num_hosts=1, num_workers_per_host=2, cpus_per_worker=0,
                            use_gpu=True, gpus_per_worker=2)
    assert gpus_only._bundles == [{"GPU": 4}]


@pytest.mark.parametrize("kwargs, message", [
    ({}, "exactly one of num_workers and num_hosts"),
    ({"num_workers": 2, "num_hosts": 2}, "exactly one of num_workers and num_hosts"),
    ({"num_workers": 2, "gpus_per_worker": 1}, "needs use_gpu=True"),
    ({"num_hosts": 2, "num_workers_per_host": 0}, "num_workers_per_host must be at least 1"),
    ({"num_workers": 2, "cpus_per_worker": 0}, "must ask for some CPUs or GPUs"),
])
def test_bad_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RayExecutor(SETTINGS, **kwargs)


@pytest.mark.parametrize("kwargs", [{"num_workers": 2}, {"num_hosts": 2}, {"use_gpu": True}])
def test_elastic_mode_takes_its_ranks_from_the_cluster(kwargs):
    with pytest.raises(ValueError, match="elastic mode .* give neither num_workers"):
        RayExecutor(SETTINGS, min_workers=1, max_workers=4, **kwargs)


def test_elastic_bounds_are_checked():
    with pytest.raises(ValueError, match=r"need 1 <= min_workers \(3\) <= max_workers \(2\)"):
        RayExecutor(SETTINGS, min_workers=3, max_workers=2)


def test_calls_before_start_ask_for_start():
    executor = RayExecutor(SETTINGS, num_workers=2)
    for call in (lambda: executor.run(len), lambda: executor.execute(len),
                 lambda: executor.execute_single(len)):
        with pytest.raises(RuntimeError, match="call start"):
            call()


def test_bundles_group_into_hosts_in_the_order_of_their_first_bundle():
    hosts = placement.group_hosts({0: "node-b", 1: "node-a", 2: "node-b", 3: "node-c"},
                                  {"node-a": "10.0.0.1", "node-b": "10.0.0.2",
                                   "node-c": "10.0.0.3"}, 2)
    assert [(h.address, h.bundles, h.slots) for h in hosts] == [
        ("10.0.0.2", [0, 2], 4), ("10.0.0.1", [1], 2), ("10.0.0.3", [3], 2)]


def test_ray_nodes_sharing_an_address_are_one_host():
    hosts = placement.group_hosts({0: "n1", 1: "n2", 2: "n3"},
                                  {"n1": "10.0.0.1", "n2": "10.0.0.1", "n3": "10.0.0.2"}, 1)
    assert [(h.address, h.bundles, h.slots) for h in hosts] == [
        ("10.0.0.1", [0, 1], 2), ("10.0.0.2", [2], 1)]


def test_a_bundle_on_a_dead_node_is_an_error():
    with pytest.raises(RuntimeError, match="bundle 1 is on Ray node gone"):
        placement.group_hosts({0: "n1", 1: "gone"}, {"n1": "10.0.0.1"}, 1)


def test_importing_tf_ring_and_tf_ring_ray_does_not_import_ray():
    code = ("import sys, tf_ring, tf_ring.ray, tf_ring.ray.agent; "
            "from tf_ring.ray import RayExecutor; print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_agent_gives_ranks_the_threads_of_their_cpus(monkeypatch):
    from tf_ring.ray import agent
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # what Ray gives a 0-CPU actor; restored after
    host_agent = agent.HostAgent("ab" * 32, nics="127.0.0.0/8", cpus_per_worker=3.5)
    try:
        assert os.environ["OMP_NUM_THREADS"] == "3"
        service = endpoints.parse_endpoint(host_agent.info()["service"])
        assert (service.addresses, service.port) == (["127.0.0.1"], host_agent._service.port)
    finally:
        host_agent.close()
