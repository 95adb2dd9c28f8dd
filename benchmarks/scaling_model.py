"""Scaling model: an alpha-beta (latency + bandwidth) cost model of the
allreduce paths, fitted to measurements here and used to predict the
scaling efficiency of data-parallel steps at cluster scale.

    python benchmarks/scaling_model.py                     # the predictions (no MPI needed)
    tfringrun -np 2 python benchmarks/scaling_model.py --measure
    tfringrun -np 3 python benchmarks/scaling_model.py --measure --predict-from FIT

--measure times tf_ring's eager allreduce (and mpi4py's on the same buffers)
at several sizes, fits t = 2(p-1)*alpha + 2(p-1)/p * bytes / bandwidth (the
ring's cost), and prints the fit as FIT ("alpha_us,GBps"). Passing that FIT
to a run with another rank count prints the prediction next to the
measurement. The model and its inputs are explained in docs/scaling-model.md.
"""
import argparse
import json
import math
import os

PROFILES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "layer_profiles.json")

GBIT = 1e9 / 8  # bytes per second in one Gbit/s

# Model inputs. Step times are published single-GPU throughputs (cited in
# docs/scaling-model.md); gradient sizes are counted from the Keras
# application models (trainable weights), BERT-large from its architecture.
MODELS = {
    # name: (parameters, gradient tensors, samples per step per GPU, samples/s on one GPU)
    "ResNet-101": (44_601_832, 418, 64, 133.0),   # P100; estimated, see the docs
    "VGG-16": (138_357_544, 32, 64, 154.0),       # P100, tf_cnn_benchmarks, May 2017
    "Inception V3": (23_817_352, 190, 64, 142.0),  # P100, same table
    "BERT-large": (340_000_000, 391, 312, 485.59),  # A100 80GB, seq 128, mixed precision
}

CLUSTERS = {
    # name: (hosts, GPUs per host, NIC Gbit/s, intra-host allreduce bus GB/s,
    #        per-hop latency inter-host s, per-hop latency intra-host s, models)
    "Horovod's 2017 setting: 128 x 4 P100, 25 Gbit/s RoCE": (
        128, 4, 25, 10.0, 10e-6, 5e-6, ["Inception V3", "ResNet-101", "VGG-16"]),
    "VGG-16 at 128 GPUs: 32 x 4 P100, 25 Gbit/s": (32, 4, 25, 10.0, 10e-6, 5e-6, ["VGG-16"]),
    "BERT-large: 16 x 8 A100, 100 Gbit/s": (16, 8, 100, 200.0, 10e-6, 3e-6, ["BERT-large"]),
}

BACKWARD_SHARE = 2.0 / 3.0  # the backward pass is about twice the forward pass


def ring_allreduce_s(nbytes, ranks, bandwidth, alpha):
    """Ring allreduce: 2(p-1) steps, each moving nbytes/p over the slowest link."""
    if ranks < 2:
        return 0.0
    return 2 * (ranks - 1) * (alpha + nbytes / ranks / bandwidth)


def flat_allreduce_s(nbytes, hosts, per_host, nic_bw, alpha_nic):
    """One ring over every GPU, host by host: each step waits for the
    inter-host hop, whose NIC carries one flow per direction."""
    return ring_allreduce_s(nbytes, hosts * per_host, nic_bw, alpha_nic)


def hierarchical_allreduce_s(nbytes, hosts, per_host, nic_bw, intra_bus_gbs, alpha_nic,
                             alpha_intra):
    """Reduce-scatter inside the host, a ring across hosts for each GPU's
    slice (the host's slices share one NIC), allgather inside the host."""
    intra = 0.0
    if per_host > 1:
        # NCCL's bus bandwidth already includes the 2(g-1)/g factor.
        intra = 2 * (per_host - 1) / per_host * nbytes / (intra_bus_gbs * 1e9) \
            + 2 * (per_host - 1) * alpha_intra
    inter = ring_allreduce_s(nbytes, hosts, nic_bw, alpha_nic)  # per_host slices of nbytes/per_host
    return intra + inter


def step_efficiency(compute_s, comm_s, overlap):
    """Scaling efficiency of a step: compute / (compute + exposed comm).
    With overlap, the bound where the allreduce hides behind the whole
    backward pass (overlapped_step_s models the tail instead)."""
    exposed = max(0.0, comm_s - BACKWARD_SHARE * compute_s) if overlap else comm_s
    return compute_s / (compute_s + exposed)


def load_profiles(path=PROFILES):
    """Each model's layers in forward order (benchmarks/layer_profiles.py)."""
    with open(path) as f:
        return json.load(f)


def gradient_arrivals(layers, backward_s, bytes_per_param):
    """(seconds into the backward pass, bytes) of every gradient tensor, in
    the order they appear: the layers run last to first, each taking a share
    of the backward pass in proportion to its forward FLOPs, and a layer's
    gradients are ready when it ends."""
    total = float(sum(layer["flops"] for layer in layers))
    t, arrivals = 0.0, []
    for layer in reversed(layers):
        t += backward_s * (layer["flops"] / total if total else 1.0 / len(layers))
        arrivals.extend((t, n * bytes_per_param) for n in layer["tensors"])
    return arrivals


def overlapped_comm_end(arrivals, allreduce_s, fusion_bytes):
    """(when the last allreduce ends, in seconds into the backward pass;
    how many fused allreduces ran) when, as tf_ring's engine does with its
    default cycle time of 0, every time the network is free one allreduce
    takes every gradient ready by then, up to fusion_bytes (a larger tensor
    alone). `allreduce_s(bytes)` is one allreduce's time."""
    free, i, batches = 0.0, 0, 0
    while i < len(arrivals):
        start = max(free, arrivals[i][0])
        size, j = arrivals[i][1], i + 1
        while j < len(arrivals) and arrivals[j][0] <= start and size + arrivals[j][1] <= fusion_bytes:
            size += arrivals[j][1]
            j += 1
        free = start + allreduce_s(size)
        batches += 1
        i = j
    return free, batches


def overlapped_step_s(layers, compute_s, allreduce_s, fusion_bytes, bytes_per_param):
    """(step seconds, fused allreduces) with the allreduces overlapping the
    backward pass: the forward pass, then the later of the backward pass's
    end and the last allreduce's (the tail: the first layers' gradients,
    which come last)."""
    backward = BACKWARD_SHARE * compute_s
    end, batches = overlapped_comm_end(gradient_arrivals(layers, backward, bytes_per_param),
                                       allreduce_s, fusion_bytes)
    return compute_s - backward + max(backward, end), batches


def allreduce_time_fn(cluster, hierarchical):
    """seconds(bytes) of one allreduce on `cluster` by the flat ring or the
    hierarchical path."""
    hosts, per_host, nic_gbit, intra_gbs, alpha_nic, alpha_intra, _ = cluster
    nic = nic_gbit * GBIT
    if hierarchical:
        return lambda nbytes: hierarchical_allreduce_s(nbytes, hosts, per_host, nic, intra_gbs, alpha_nic,
                                                       alpha_intra)
    return lambda nbytes: flat_allreduce_s(nbytes, hosts, per_host, nic, alpha_nic)


def predict(name, cluster, fusion_bytes=64 << 20, grad_bytes_per_param=4, profiles=None):
    """Rows for one model on one cluster, one per optimisation: (model,
    label, compute ms, allreduce ms, latency share, efficiency). Rows with
    overlap replay the backward pass (overlapped_step_s); their allreduce ms
    is the network's busy time, as many batches as the gradients' arrival
    made."""
    hosts, per_host, _, _, alpha_nic, _, _ = cluster
    params, tensors, batch, rate = MODELS[name]
    layers = (profiles or load_profiles())[name]
    compute = batch / rate
    rows = []
    variants = [
        # label, bytes per parameter, hierarchical, how
        ("per tensor, flat ring", grad_bytes_per_param, False, "per tensor"),
        ("fused, flat ring", grad_bytes_per_param, False, "fused"),
        ("fused, flat ring, overlap (Horovod 2017)", grad_bytes_per_param, False, "overlap"),
        ("fused, hierarchical", grad_bytes_per_param, True, "fused"),
        ("fused, hierarchical, fp16", grad_bytes_per_param / 2, True, "fused"),
        ("fused, hierarchical, overlap", grad_bytes_per_param, True, "overlap"),
        ("fused, hierarchical, fp16, overlap", grad_bytes_per_param / 2, True, "overlap"),
    ]
    for label, per_param, hier, how in variants:
        one = allreduce_time_fn(cluster, hier)
        grads = params * per_param
        if how == "per tensor":
            calls, busy = tensors, tensors * one(grads / tensors)
            efficiency = step_efficiency(compute, busy, False)
        elif how == "fused":
            calls = max(1, math.ceil(grads / fusion_bytes))
            busy = calls * one(grads / calls)
            efficiency = step_efficiency(compute, busy, False)
        else:
            step, calls, busy = overlapped_step(layers, compute, one, fusion_bytes, per_param)
            efficiency = compute / step
        ranks = hosts if hier else hosts * per_host
        latency = calls * 2 * (ranks - 1) * alpha_nic
        rows.append((name, label, compute * 1e3, busy * 1e3, latency / busy if busy else 0.0, efficiency))
    return rows


def overlapped_step(layers, compute_s, allreduce_s, fusion_bytes, bytes_per_param):
    """overlapped_step_s plus the network's busy time: (step s, batches, busy s)."""
    busy = []

    def timed_allreduce(nbytes):
        busy.append(allreduce_s(nbytes))
        return busy[-1]

    step, batches = overlapped_step_s(layers, compute_s, timed_allreduce, fusion_bytes, bytes_per_param)
    return step, batches, sum(busy)


# Horovod's README, 128 servers x 4 Pascal GPUs on 25 Gbit/s RoCE.
HOROVOD_MEASURED = [("Inception V3", 512, 0.90), ("ResNet-101", 512, 0.90), ("VGG-16", 512, 0.68),
                    ("VGG-16", 128, 0.79)]


def horovod_check_rows(profiles=None):
    """(model, GPUs, no overlap, perfect-overlap bound, replayed tail,
    measured) for Horovod's 2017 configuration: fused flat ring, overlap."""
    profiles = profiles or load_profiles()
    rows = []
    for name, gpus, measured in HOROVOD_MEASURED:
        cluster = (gpus // 4, 4, 25, 10.0, 10e-6, 5e-6, [name])
        params, _, batch, rate = MODELS[name]
        compute = batch / rate
        one = allreduce_time_fn(cluster, False)
        calls = max(1, math.ceil(params * 4 / (64 << 20)))
        serial = calls * one(params * 4 / calls)
        step, _, _ = overlapped_step(profiles[name], compute, one, 64 << 20, 4)
        rows.append((name, gpus, step_efficiency(compute, serial, False), step_efficiency(compute, serial, True),
                     compute / step, measured))
    return rows


FUSION_SWEEP_MB = (1, 4, 16, 64, 256)


def fusion_sweep_rows(name, cluster, profiles=None, hierarchical=True, bytes_per_param=4):
    """(fusion MB, batches, efficiency) with overlap, for each threshold."""
    profiles = profiles or load_profiles()
    params, _, batch, rate = MODELS[name]
    compute = batch / rate
    one = allreduce_time_fn(cluster, hierarchical)
    rows = []
    for mb in FUSION_SWEEP_MB:
        step, batches, _ = overlapped_step(profiles[name], compute, one, mb << 20, bytes_per_param)
        rows.append((mb, batches, compute / step))
    return rows


def print_predictions():
    profiles = load_profiles()
    print("\nCheck: Horovod's 2017 runs (fused flat ring, overlap), 25 Gbit/s, 4 P100 per host")
    print("| model, GPUs | model: no overlap | model: perfect overlap | model: replayed tail | Horovod measured |")
    print("|---|---|---|---|---|")
    for name, gpus, none, bound, tail, measured in horovod_check_rows(profiles):
        print("| %s, %d | %.0f%% | %.0f%% | %.0f%% | %.0f%% |"
              % (name, gpus, 100 * none, 100 * bound, 100 * tail, 100 * measured))
    for title, cluster in CLUSTERS.items():
        print("\n" + title)
        print("| model | allreduce | step compute ms | allreduce ms | latency share | efficiency |")
        print("|---|---|---|---|---|---|")
        for model in cluster[-1]:
            for name, label, comp, comm, lat, eff in predict(model, cluster, profiles=profiles):
                print("| %s | %s | %.0f | %.0f | %.0f%% | %.0f%% |"
                      % (name, label, comp, comm, 100 * lat, 100 * eff))
        for model in cluster[-1]:
            print("\n%s, hierarchical with overlap, by fusion threshold:" % model)
            print("| fusion MB | allreduces per step | efficiency |")
            print("|---|---|---|")
            for mb, batches, eff in fusion_sweep_rows(model, cluster, profiles):
                print("| %d | %d | %.0f%% |" % (mb, batches, 100 * eff))


def fit_ring(points, ranks):
    """(alpha s, bandwidth B/s) of the ring cost t = 2(p-1)*alpha +
    2(p-1)/p * bytes / B fitted to [(bytes, seconds)] by least squares on
    the relative error, so the small sizes (latency) weigh as much as the
    large ones (bandwidth)."""
    alpha, beta = least_squares_2(
        [(2 * (ranks - 1) / t, 2 * (ranks - 1) / ranks * b / t) for b, t in points])
    return alpha, 1.0 / beta  # beta = 1/B


def least_squares_2(rows):
    """(u, v) minimising sum((x0*u + x1*v - 1)^2) over rows (x0, x1): the
    fit of t = x0'*u + x1'*v on the relative error, with x = x' / t."""
    s00 = sum(x0 * x0 for x0, _ in rows)
    s01 = sum(x0 * x1 for x0, x1 in rows)
    s11 = sum(x1 * x1 for _, x1 in rows)
    r0 = sum(x0 for x0, _ in rows)
    r1 = sum(x1 for _, x1 in rows)
    det = s00 * s11 - s01 * s01
    return (r0 * s11 - r1 * s01) / det, (s00 * r1 - s01 * r0) / det


def measure(args):
    import numpy as np
    import tensorflow as tf
    from mpi4py import MPI

    import tf_ring as hvd
    from bench_util import timed

    hvd.init()
    comm = MPI.COMM_WORLD
    p = hvd.size()
    sizes = [4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20]
    measured = {"tf_ring": [], "mpi4py": []}
    for size in sizes:
        data = np.random.default_rng(hvd.rank()).random(size // 4, dtype=np.float32)
        out = np.empty_like(data)
        tensor = tf.constant(data)
        reps = args.repeats
        t_ring, _ = timed(lambda: hvd.allreduce(tensor, op=hvd.Sum, name="model").numpy(), reps)
        t_mpi, _ = timed(lambda: comm.Allreduce(data, out, op=MPI.SUM), reps)
        measured["tf_ring"].append((size, t_ring))
        measured["mpi4py"].append((size, t_mpi))
    if hvd.rank() != 0:
        return
    given = None
    if args.predict_from:
        alpha_us, gbps = (float(v) for v in args.predict_from.split(","))
        given = (alpha_us * 1e-6, gbps * 1e9)
    print("\nRing model fit, %d ranks (median of %d; t = 2(p-1)*alpha + 2(p-1)/p*bytes/B)"
          % (p, args.repeats))
    for who, points in measured.items():
        alpha, bw = fit_ring(points, p)
        print("%s: alpha %.1f us per step, B %.2f GB/s  (FIT %.1f,%.3f)"
              % (who, alpha * 1e6, bw / 1e9, alpha * 1e6, bw / 1e9))
        print("| bytes | measured ms | this fit ms |%s" % (" predicted ms |" if given else ""))
        for size, t in points:
            row = "| %d | %.3f | %.3f |" % (size, t * 1e3, ring_allreduce_s(size, p, bw, alpha) * 1e3)
            if given and who == "tf_ring":
                row += " %.3f |" % (ring_allreduce_s(size, p, given[1], given[0]) * 1e3)
            elif given:
                row += " |"
            print(row)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--measure", action="store_true")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--predict-from", default=None,
                        help="alpha_us,GBps from another run's FIT (tf_ring's line)")
    args = parser.parse_args()
    if args.measure:
        measure(args)
    else:
        print_predictions()


if __name__ == "__main__":
    main()
