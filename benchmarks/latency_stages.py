"""Where a lone 4 KB eager allreduce spends its time, stage by stage.

    tfringrun -np 2 python benchmarks/latency_stages.py

The engine stamps each hand-off of the last op on CLOCK_MONOTONIC (the
kernel's submit, the cycle that takes the request, the cycle's agreement,
the completion callback; cc/common/observability/stage_probe.h) and this
script adds its own stamps before the call and after it returns, on the
same clock. Each stage's median over the runs is printed for rank 0, with
the whole op and a TF eager tf.identity for scale. The stamps are taken
only while this script has them on; latency.py measures with them off.
"""
import argparse
import statistics

import numpy as np
import tensorflow as tf

import tf_ring as hvd
from bench_util import print_table, stamped_runs, timed

STAGES = [
    ("Python call to kernel submit", 0, 1),
    ("submit to engine cycle taking it (wake-up)", 1, 2),
    ("negotiation (cache-hit round)", 2, 3),
    ("collective up to the done callback", 3, 4),
    ("done callback to Python return", 4, 5),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=1000)
    args = parser.parse_args()
    hvd.init()
    tensor = tf.constant(np.ones(1024, np.float32))
    for _ in range(20):
        hvd.allreduce(tensor, op=hvd.Sum)

    rows = stamped_runs(lambda: hvd.allreduce(tensor, op=hvd.Sum), args.repeats)
    t_identity, _ = timed(lambda: tf.identity(tensor), args.repeats, warmup=20)

    us = lambda ns: "%.1f" % (ns / 1e3)
    table = []
    for label, a, b in STAGES:
        table.append([label, us(statistics.median(r[b] - r[a] for r in rows)),
                      us(min(r[b] - r[a] for r in rows))])
    table.append(["whole op (this rank)", us(statistics.median(r[5] - r[0] for r in rows)),
                  us(min(r[5] - r[0] for r in rows))])
    table.append(["(TF eager tf.identity, for scale)", "%.1f" % (t_identity * 1e6), ""])
    print_table("Lone 4 KB eager allreduce by stage, %d ranks, rank 0, %d of %d runs stamped "
                "(microseconds)" % (hvd.size(), len(rows), args.repeats),
                ["stage", "median us", "min us"], table)


if __name__ == "__main__":
    main()
