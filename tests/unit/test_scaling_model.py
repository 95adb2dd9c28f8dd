"""benchmarks/scaling_model.py's cost model, checked against costs worked
out by hand, and its fit against data made from known parameters."""
import os
import subprocess
import sys

import pytest

from conftest import REPO

BENCH = os.path.join(REPO, "benchmarks")
sys.path.insert(0, BENCH)

import scaling_model as m  # noqa: E402  (imports no MPI or TensorFlow at module level)


def test_ring_cost_by_hand():
    # 4 ranks, 8 MB, 1 GB/s, 10 us: 6 steps of (10 us + 2 MB / 1 GB/s = 2 ms).
    assert m.ring_allreduce_s(8e6, 4, 1e9, 10e-6) == pytest.approx(6 * (10e-6 + 2e-3))
    assert m.ring_allreduce_s(8e6, 1, 1e9, 10e-6) == 0.0


def test_hierarchical_keeps_the_nic_bytes_and_cuts_the_hops():
    nbytes, nic = 256e6, 25 * m.GBIT
    flat = m.flat_allreduce_s(nbytes, 128, 4, nic, 10e-6)
    hier = m.hierarchical_allreduce_s(nbytes, 128, 4, nic, 1.0, 10e-6, 0.0)  # 1 GB/s inside
    # The NIC moves about 2N either way; the inter-host latency term is 4x smaller.
    nic_only = m.ring_allreduce_s(nbytes, 128, nic, 0.0)
    assert flat - 2 * 511 * 10e-6 == pytest.approx(2 * 511 / 512 * nbytes / nic)
    intra = 2 * 3 / 4 * nbytes / 1e9
    assert hier == pytest.approx(intra + nic_only + 2 * 127 * 10e-6)


def test_efficiency_bounds():
    assert m.step_efficiency(1.0, 0.5, overlap=False) == pytest.approx(1 / 1.5)
    assert m.step_efficiency(1.0, 0.5, overlap=True) == 1.0  # hidden behind a 0.67 s backward
    assert m.step_efficiency(1.0, 1.0, overlap=True) == pytest.approx(1 / (1 + 1 / 3))


def test_fit_recovers_known_parameters_and_ignores_scale():
    for ranks in (2, 3, 8):
        points = [(b, m.ring_allreduce_s(b, ranks, 3e9, 25e-6)) for b in (4096, 65536, 1 << 20, 16 << 20)]
        alpha, bandwidth = m.fit_ring(points, ranks)
        assert alpha == pytest.approx(25e-6) and bandwidth == pytest.approx(3e9)


def test_predictions_print_every_model_and_fusion_beats_per_tensor():
    out = subprocess.run([sys.executable, os.path.join(BENCH, "scaling_model.py")],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    for model in m.MODELS:
        assert "| %s | fused, hierarchical |" % model in out
    rows = {r[1]: r for r in m.predict("ResNet-101", m.CLUSTERS[next(iter(m.CLUSTERS))])}
    assert rows["fused, flat ring"][3] < rows["per tensor, flat ring"][3]
    assert rows["fused, hierarchical, fp16"][3] == pytest.approx(rows["fused, hierarchical"][3] / 2,
                                                                 rel=0.05)


def test_harness_model_fit_recovers_known_parameters():
    import harness_model as h  # imports no MPI or TensorFlow at module level
    link = 250e6
    truth = {"a_shm": 50e-6, "B_shm": 5e9, "a_chunk": 4e-3, "C_hier": 300e6,
             "a_flat_step": 3e-3, "C_flat": 20e6, "link": link}
    shm = [(n, truth["a_shm"] + n / truth["B_shm"]) for n in h.SHM_SIZES]

    def hier(n, hosts):
        return (truth["a_shm"] + n / truth["B_shm"] + 2 * (hosts - 1) * h.chunks(n) * truth["a_chunk"]
                + 2 * (hosts - 1) * n / truth["C_hier"])

    def flat(n, hosts):
        p = hosts * h.RANKS_PER_HOST
        return 2 * (p - 1) * truth["a_flat_step"] + h.flat_bytes_between_hosts(n, hosts) / truth["C_flat"]

    two = {"hierarchical": [(n, hier(n, 2)) for n in h.HIER_SIZES],
           "flat": [(n, flat(n, 2)) for n in h.FLAT_SIZES]}
    fit = h.fit_paths({"shm": shm}, two, link)
    for key in ("a_shm", "B_shm", "a_chunk", "C_hier", "a_flat_step", "C_flat"):
        assert fit[key] == pytest.approx(truth[key], rel=1e-6), key
    # With C below 2x the link, the shared term dominates at 3 hosts too.
    for n in h.HIER_SIZES:
        assert h.predict(fit, "shared", "hierarchical", n, 3) == pytest.approx(hier(n, 3), rel=1e-6)
    # The 3-host link floor: each host sends 2(H-1)/H of the data at the link's rate.
    assert h.floor_s(64 << 20, 3, link) == pytest.approx(4 / 3 * (64 << 20) / link)


# Two layers in forward order: A (1 FLOP, one 10-parameter tensor), then B
# (3 FLOPs, tensors of 20 and 5). Backward runs B first.
TWO_LAYERS = [{"name": "A", "tensors": [10], "flops": 1}, {"name": "B", "tensors": [20, 5], "flops": 3}]


def test_gradients_arrive_last_layer_first_in_proportion_to_flops():
    # 4 s of backward: B ends at 3 s, A at 4 s; 4 bytes per parameter.
    assert m.gradient_arrivals(TWO_LAYERS, 4.0, 4) == [(3.0, 80), (3.0, 20), (4.0, 40)]


def test_replay_fuses_what_is_ready_when_the_network_frees():
    arrivals = [(3.0, 80), (3.0, 20), (4.0, 40)]
    per_byte = lambda nbytes: nbytes / 100.0  # noqa: E731 - 1 s per 100 bytes
    # Fusion 1000: B's 100 bytes at 3 s (to 4.0), then A's 40 (to 4.4).
    assert m.overlapped_comm_end(arrivals, per_byte, 1000) == (pytest.approx(4.4), 2)
    # Fusion 80: B's tensors go one by one (3.0-3.8, 3.8-4.0), then A (4.0-4.4).
    assert m.overlapped_comm_end(arrivals, per_byte, 80) == (pytest.approx(4.4), 3)
    # A slow network: A's gradient waits for the first batch, so it joins nothing.
    slow = lambda nbytes: nbytes / 10.0  # noqa: E731
    assert m.overlapped_comm_end(arrivals, slow, 1000) == (pytest.approx(3.0 + 10.0 + 4.0), 2)


def test_overlapped_step_is_compute_plus_the_exposed_tail():
    compute = 6.0  # backward 4 s after 2 s of forward
    free = lambda nbytes: 0.0  # noqa: E731
    assert m.overlapped_step_s(TWO_LAYERS, compute, free, 1000, 4) == (pytest.approx(6.0), 2)
    per_byte = lambda nbytes: nbytes / 100.0  # noqa: E731 - as above: the last allreduce ends at 4.4
    assert m.overlapped_step_s(TWO_LAYERS, compute, per_byte, 1000, 4)[0] == pytest.approx(2.0 + 4.4)


def test_the_layer_profiles_hold_each_models_parameters():
    profiles = m.load_profiles()
    for name, (params, tensors, _, _) in m.MODELS.items():
        layers = profiles[name]
        counted = sum(sum(layer["tensors"]) for layer in layers)
        if name == "BERT-large":  # from the architecture; the published figure is rounded
            assert abs(counted - params) / params < 0.02
        else:
            assert counted == params
            assert sum(len(layer["tensors"]) for layer in layers) == tensors
        assert sum(layer["flops"] for layer in layers) > 0
