"""benchmarks/gpu_collectives.py without a GPU: its size table, argument
parsing and the 160-tensor step it shares with the CPU benchmark (b)."""
import ast
import os
import subprocess
import sys

import numpy as np

from conftest import REPO

BENCH = os.path.join(REPO, "benchmarks")
sys.path.insert(0, BENCH)

import gpu_collectives as g  # noqa: E402  (imports no GPU library at module level)


def cpu_gradient_sizes():
    """gradient_step.gradient_sizes, read from its source (that module imports TensorFlow)."""
    tree = ast.parse(open(os.path.join(BENCH, "gradient_step.py")).read())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "gradient_sizes")
    namespace = {"np": np}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), "gradient_step.py", "exec"), namespace)
    return namespace["gradient_sizes"]()


def test_default_sizes_run_from_4kb_to_256mb_by_4():
    args = g.parse_args([])
    assert args.sizes[0] == 4096 and args.sizes[-1] == 256 << 20
    assert all(b == 4 * a for a, b in zip(args.sizes, args.sizes[1:]))
    assert len(args.sizes) == 9


def test_size_arguments_accept_units():
    args = g.parse_args(["--min-size", "64KB", "--max-size", "1M", "--factor", "2"])
    assert args.sizes == [64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20]
    assert g.parse_size("4096") == 4096


def test_the_step_uses_the_cpu_benchmarks_160_sizes():
    assert np.array_equal(g.gradient_sizes(), cpu_gradient_sizes())
    assert len(g.gradient_sizes()) == 160


def test_repeats_shrink_for_large_messages_but_stay_bounded():
    assert g.repeats_for(4096) == 200
    assert g.repeats_for(256 << 20) == 16
    assert g.repeats_for(1 << 40) == 10


def test_dry_run_prints_the_plan_without_a_gpu():
    result = subprocess.run([sys.executable, os.path.join(BENCH, "gpu_collectives.py"), "--dry-run"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "4 KB (x200)" in result.stdout and "256 MB (x16)" in result.stdout
    assert "step: 160 tensors" in result.stdout


def test_each_goal_is_judged_from_the_runs_results():
    results = {"sizes": [{"bytes": 4096, "tf_ring_s": 104e-6, "torch_s": 83e-6},
                         {"bytes": 64 << 20, "tf_ring_s": 20.65e-3, "torch_s": 21.23e-3},
                         {"bytes": 256 << 20, "tf_ring_s": 111.1e-3, "torch_s": 91.2e-3}],
               "step": {"tf_ring_s": 9.07e-3, "torch_per_tensor_s": 21.44e-3}}
    rows = g.goal_rows(results)
    assert rows[0][1:] == ["2.36x", "met"]
    assert rows[1][1:] == ["worst 1.22", "not met"]  # the worse of 64 and 256 MB decides
    assert rows[2][1:] == ["+21 us", "met"]
    # --step-only: only the step's goal
    assert [r[0] for r in g.goal_rows({"sizes": [], "step": results["step"]})] == [rows[0][0]]
