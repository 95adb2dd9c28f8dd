"""GPU allreduce: tf_ring's engine (NCCL path, engine-only binding) against
torch.distributed's NCCL process group, on the same CUDA buffers in one run.

(a) one float32 allreduce (Sum) of 4 KB .. 256 MB, median time per call;
(b) one training step of 160 gradient-sized tensors (benchmarks/gradient_step.py's
    sizes, about 25 MB): tf_ring submits all 160 and waits (the engine fuses
    them), torch.distributed makes one all_reduce call per tensor, and, as a
    reference, one all_reduce of the concatenated buffer.

    tfringrun -np 2 --share-gpu python3 benchmarks/gpu_collectives.py
    python3 benchmarks/gpu_collectives.py --dry-run     # the plan, no GPU needed

Needs PyTorch with CUDA, mpi4py and tf_ring_engine/_tf_ring_engine.so built
with CUDA (tf_ring_engine/build.sh). No TensorFlow.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # tf_ring_engine lives at the repo root

KB, MB = 1 << 10, 1 << 20
TARGETS = ("160-tensor step at least 2x faster than one all_reduce per tensor; "
           ">= 64 MB within 10% of torch.distributed; 4 KB within 50 us of it")


def gradient_sizes(count=160, seed=1234):
    """Element counts of the 160 gradients: the same draw as benchmarks/gradient_step.py."""
    rng = np.random.default_rng(seed)
    return np.exp(rng.uniform(np.log(64), np.log(262144), size=count)).astype(np.int64)


def size_table(smallest=4 * KB, largest=256 * MB, factor=4):
    """Message sizes in bytes: smallest, smallest*factor, ..., up to largest."""
    if smallest <= 0 or largest < smallest or factor < 2:
        raise ValueError("need 0 < smallest <= largest and factor >= 2")
    sizes = []
    s = smallest
    while s <= largest:
        sizes.append(s)
        s *= factor
    return sizes


def repeats_for(nbytes, budget_bytes=4 << 30, most=200, least=10):
    """Enough repeats for a stable median, but bounded time at large sizes."""
    return int(max(least, min(most, budget_bytes // max(nbytes, 1))))


def human(nbytes):
    if nbytes >= MB:
        return "%d MB" % (nbytes // MB)
    return "%d KB" % (nbytes // KB)


def parse_size(text):
    text = text.strip().upper()
    for suffix, unit in (("KB", KB), ("MB", MB), ("K", KB), ("M", MB), ("B", 1)):
        if text.endswith(suffix):
            return int(float(text[:-len(suffix)]) * unit)
    return int(text)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--min-size", type=parse_size, default=4 * KB, help="smallest message (default 4KB)")
    p.add_argument("--max-size", type=parse_size, default=256 * MB, help="largest message (default 256MB)")
    p.add_argument("--factor", type=int, default=4, help="size step (default 4)")
    p.add_argument("--step-repeats", type=int, default=30, help="repeats of the 160-tensor step")
    p.add_argument("--step-only", action="store_true", help="skip the size sweep (a); run the step (b) alone")
    p.add_argument("--json", default=None, help="also write the results here (rank 0)")
    p.add_argument("--port", type=int, default=int(os.environ.get("TF_RING_BENCH_PORT", "29533")),
                   help="TCP port for torch.distributed's rendezvous on localhost")
    p.add_argument("--dry-run", action="store_true", help="print the plan and exit (no GPU, no MPI)")
    args = p.parse_args(argv)
    args.sizes = size_table(args.min_size, args.max_size, args.factor)
    return args


def plan(args):
    steps = gradient_sizes()
    lines = ["sizes: " + ", ".join("%s (x%d)" % (human(s), repeats_for(s)) for s in args.sizes),
             "step: %d tensors, %.1f MB float32, %d repeats" % (len(steps), steps.sum() * 4 / MB,
                                                                 args.step_repeats),
             "targets: " + TARGETS]
    return "\n".join(lines)


def goal_rows(results):
    """[goal, measured, met?] for each target, from the run's results (the
    size rows present and the step): what the run printed, judged."""
    rows = []
    step = results.get("step") or {}
    if step.get("tf_ring_s"):
        ratio = step["torch_per_tensor_s"] / step["tf_ring_s"]
        rows.append(["160-tensor step >= 2x faster than one all_reduce per tensor",
                     "%.2fx" % ratio, "met" if ratio >= 2.0 else "not met"])
    large = [r for r in results.get("sizes", []) if r["bytes"] >= 64 * MB]
    if large:
        worst = max(r["tf_ring_s"] / r["torch_s"] for r in large)
        rows.append([">= 64 MB within 10% of torch.distributed", "worst %.2f" % worst,
                     "met" if worst <= 1.10 else "not met"])
    small = [r for r in results.get("sizes", []) if r["bytes"] == 4 * KB]
    if small:
        diff_us = (small[0]["tf_ring_s"] - small[0]["torch_s"]) * 1e6
        rows.append(["4 KB within 50 us of torch.distributed", "%+.0f us" % diff_us,
                     "met" if diff_us <= 50 else "not met"])
    return rows


def engine_counts_per_call(e, fn, calls):
    """The engine's counters (cycles, negotiations, fused batches...) per fn() call."""
    e.reset_stats()
    for _ in range(calls):
        fn()
    counts = e.stats()
    return {k: counts[k] / calls for k in ("cycles", "negotiations", "fused_batches", "cache_hits", "tensors")
            if k in counts}


def main(argv=None):
    args = parse_args(argv)
    if args.dry_run:
        print(plan(args))
        return 0

    import torch
    import torch.distributed as dist

    import tf_ring_engine as e
    from bench_util import ms, print_table, timed

    local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"))
    torch.cuda.set_device(local % torch.cuda.device_count())
    e.init()
    rank, size = e.rank(), e.size()
    device = torch.device("cuda", torch.cuda.current_device())
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%d" % args.port, rank=rank,
                            world_size=size, device_id=device)

    def tf_ring_once(x, name):
        e.allreduce(x, op=e.Sum, name=name, output=x).wait()

    def torch_once(x):
        dist.all_reduce(x)
        torch.cuda.synchronize()

    rows, results = [], {"gpu": torch.cuda.get_device_name(), "ranks": size, "sizes": [], "step": {}}
    for nbytes in ([] if args.step_only else args.sizes):
        x = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
        reps = repeats_for(nbytes)
        t_ring, _ = timed(lambda: tf_ring_once(x, "bench.%d" % nbytes), reps)
        t_torch, _ = timed(lambda: torch_once(x), reps)
        rows.append([human(nbytes), ms(t_ring), ms(t_torch), "%.2f" % (t_ring / t_torch),
                     "%+.1f" % ((t_ring - t_torch) * 1e6), "%.2f" % (nbytes / t_ring / 1e9)])
        results["sizes"].append({"bytes": nbytes, "tf_ring_s": t_ring, "torch_s": t_torch})
        del x
    if rows:
        print_table("allreduce Sum float32 on %s, %d ranks (median ms)" % (torch.cuda.get_device_name(), size),
                    ["size", "tf_ring", "torch.distributed", "ratio", "diff us", "tf_ring GB/s"], rows)

    sizes = gradient_sizes()
    grads = [torch.rand(int(n), dtype=torch.float32, device=device) for n in sizes]
    flat = torch.zeros(int(sizes.sum()), dtype=torch.float32, device=device)

    submit_seconds = []

    def ring_step():
        start = time.perf_counter()
        pending = [e.allreduce(g, op=e.Sum, name="grad.%d" % i, output=g) for i, g in enumerate(grads)]
        submit_seconds.append(time.perf_counter() - start)
        for p in pending:
            p.wait()

    def grouped_step():
        for p in e.grouped_allreduce(grads, op=e.Sum, name="grads", outputs=grads):
            p.wait()

    def torch_step():
        for g in grads:
            dist.all_reduce(g)
        torch.cuda.synchronize()

    def torch_flat_step():
        dist.all_reduce(flat)
        torch.cuda.synchronize()

    t_ring, _ = timed(ring_step, args.step_repeats)
    per_step = engine_counts_per_call(e, ring_step, 5)
    per_step["submit_ms"] = 1e3 * sorted(submit_seconds)[len(submit_seconds) // 2]  # the 160 calls alone
    t_grouped, _ = timed(grouped_step, args.step_repeats)
    per_group = engine_counts_per_call(e, grouped_step, 5)
    t_torch, _ = timed(torch_step, args.step_repeats)
    t_flat, _ = timed(torch_flat_step, args.step_repeats)
    print_table("160 gradients, %.1f MB float32, %d ranks (median ms; ratio = torch per-tensor / this)"
                % (sizes.sum() * 4 / MB, size),
                ["method", "ms", "ratio"],
                [["tf_ring (160 submits, fused)", ms(t_ring), "%.2f" % (t_torch / t_ring)],
                 ["tf_ring grouped_allreduce (one negotiation)", ms(t_grouped), "%.2f" % (t_torch / t_grouped)],
                 ["torch.distributed, 160 all_reduce calls", ms(t_torch), "1.00"],
                 ["torch.distributed, 1 call on the concatenation", ms(t_flat), "%.2f" % (t_torch / t_flat)]])
    results["step"] = {"tf_ring_s": t_ring, "tf_ring_grouped_s": t_grouped, "torch_per_tensor_s": t_torch,
                       "torch_flat_s": t_flat, "engine_per_step": per_step, "engine_per_grouped_step": per_group,
                       "engine_params": {k: v for k, v in e.engine_params().items()
                                         if k in ("fusion_threshold", "cycle_time_ms")}}
    if rank == 0:
        print("engine per 160-submit step: " + ", ".join("%s %.1f" % kv for kv in sorted(per_step.items()))
              + "  (%s)" % results["step"]["engine_params"])
        print("engine per grouped step: " + ", ".join("%s %.1f" % kv for kv in sorted(per_group.items())))
    goals = goal_rows(results)
    if goals:
        print_table("goals, this run", ["goal", "measured", ""], goals)
    if rank == 0:
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
    dist.destroy_process_group()
    e.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
