#!/usr/bin/env bash
# The one command for the GPU machine (repo root as cwd, results under $OUT):
# builds the engine-only library with CUDA and NCCL (incremental), runs
# tests/gpu on 2 and 3 ranks sharing the GPU, runs the benchmark on 2 ranks,
# and prints a compact summary. Uses the system Open MPI (mpirun on PATH).
#
#   bash tests/gpu/run_on_device.sh            # everything
#   SKIP_BENCH=1 bash tests/gpu/run_on_device.sh
#   MPS=0 bash tests/gpu/run_on_device.sh      # no MPS, even where it is available
#   TEST_TIMEOUT=90 BENCH_TIMEOUT=120 ...      # seconds per test / for the benchmark
#
# Without MPS the ranks' CUDA contexts take turns on the GPU in time slices,
# so every collective waits milliseconds for the peer's kernel to be
# scheduled (a 4 KB allreduce took 5 ms, against 0.07-0.16 ms with MPS); MPS
# runs their kernels side by side, closer to one GPU per rank. On by default
# where nvidia-cuda-mps-control exists.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-$(mktemp -d)}"
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"
# A full path: mpirun may find another python3 first on its PATH.
py="${PYTHON:-$(command -v python3)}"

{
  echo "== machine"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -n 2
  (command -v nvcc >/dev/null && nvcc --version | tail -n 1) || echo "nvcc: none"
  mpirun --version 2>&1 | head -n 1
  "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())' 2>&1
} | tee "$out/machine.txt"

mps=off
if [ "${MPS:-1}" != 0 ]; then
  if command -v nvidia-cuda-mps-control >/dev/null && nvidia-cuda-mps-control -d 2>"$out/mps.log"; then
    mps=on
    trap 'echo quit | nvidia-cuda-mps-control' EXIT
  else
    echo "MPS not started (no nvidia-cuda-mps-control, or see mps.log): ranks time-slice the GPU"
  fi
fi
echo "MPS: $mps" | tee -a "$out/machine.txt"

echo "== build"
start=$(date +%s)
if bash tf_ring_engine/build.sh --cuda > "$out/build.log" 2>&1; then
  build=ok
elif TF_RING_ENGINE_XLA=0 bash tf_ring_engine/build.sh --cuda > "$out/build_no_xla.log" 2>&1; then
  # The XLA handlers (built where JAX is) must not cost the other GPU tests.
  build="ok without the XLA handlers (they failed to build: build.log)"
  tail -n 30 "$out/build.log"
else
  build=FAILED
fi
echo "build: $build in $(( $(date +%s) - start )) s (log: build.log)"
tail -n 3 "$out/build.log"
if [ "$build" = FAILED ]; then tail -n 60 "$out/build.log"; exit 1; fi

echo "== tests/gpu (2 and 3 ranks, --share-gpu)"
start=$(date +%s)
# A bound per test (pytest-timeout, where installed): a hang in one test
# must not eat the GPU lease that the others and the benchmark need.
per_test=()
if "$py" -c 'import pytest_timeout' 2>/dev/null; then per_test=(--timeout "${TEST_TIMEOUT:-90}"); fi
"$py" -m pytest -q -rs -p no:cacheprovider --durations=0 "${per_test[@]}" tests/gpu/test_gpu.py \
  --junitxml="$out/gpu_tests.xml" > "$out/tests.log" 2>&1
tests_rc=$?
echo "tests: exit $tests_rc in $(( $(date +%s) - start )) s (log: tests.log)"
grep -E "passed|failed|skipped|error" "$out/tests.log" | tail -n 5
if [ $tests_rc -ne 0 ]; then grep -E "^(FAILED|ERROR)|Error|error:" "$out/tests.log" | head -n 40; fi

bench_rc=skipped
if [ -z "${SKIP_BENCH:-}" ]; then
  echo "== benchmark (2 ranks, one GPU shared)"
  start=$(date +%s)
  timeout -k 5 "${BENCH_TIMEOUT:-150}" "$py" -m tf_ring.run -np 2 --share-gpu "$py" benchmarks/gpu_collectives.py --json "$out/bench_np2.json" \
    > "$out/bench.log" 2>&1
  bench_rc=$?
  echo "benchmark: exit $bench_rc in $(( $(date +%s) - start )) s (log: bench.log)"
  grep -v "^NCCL\|^\s*$" "$out/bench.log" | tail -n 40
fi

echo "== summary: MPS $mps, build $build, tests exit $tests_rc, benchmark $bench_rc (files in $out)"
[ "$tests_rc" = 0 ]
