"""Installing like any package: `pip wheel .` with pip's default build
isolation compiles against the TensorFlow of the environment pip runs in
(here, the test's own interpreter), and the wheel's library loads and runs.

A copy of the tree is built, so the checkout's own build stays untouched.
The isolated build environment gets setuptools from the package index.
"""
import json
import os
import shutil
import subprocess
import sys
import zipfile

from conftest import REPO

_IGNORED = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__", "*.so",
                                  "*.o", "_build_info.json", ".pytest_cache", "checkpoints")


def _source_copy(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(REPO, src, ignore=_IGNORED)
    return src


def _pip_wheel(python, src, out, env=None):
    # No --no-build-isolation: this is what `pip install .` does by default.
    return subprocess.run([python, "-m", "pip", "wheel", "--no-deps", "-w", str(out), str(src)],
                          capture_output=True, text=True, timeout=900, env=env)


def test_isolated_wheel_builds_against_the_installed_tensorflow(tmp_path):
    import tensorflow as tf

    src = _source_copy(tmp_path)
    out = tmp_path / "wheels"
    result = _pip_wheel(sys.executable, src, out)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    wheels = list(out.glob("tf_ring-*.whl"))
    assert len(wheels) == 1, os.listdir(out)

    with zipfile.ZipFile(wheels[0]) as wheel:
        names = wheel.namelist()
        assert "tf_ring/_tf_ring.so" in names
        assert "tf_ring/keras/callbacks.py" in names
        info = json.loads(wheel.read("tf_ring/_build_info.json"))
        wheel.extractall(tmp_path / "unpacked")
    assert info["tf_version"] == tf.__version__
    assert info["python"] == "%d.%d" % sys.version_info[:2]

    # The unpacked wheel (not the checkout) loads and runs a collective.
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "unpacked"), TF_CPP_MIN_LOG_LEVEL="2")
    probe = ("import tf_ring, tensorflow as tf; tf_ring.init(); "
             "print(tf_ring.__file__); print(tf_ring.allreduce(tf.constant([2.0, 3.0])).numpy())")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         cwd=str(tmp_path), env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    lines = run.stdout.splitlines()
    assert lines[0].startswith(str(tmp_path / "unpacked")), lines
    assert lines[-1] == "[2. 3.]", lines


def test_isolated_build_without_tensorflow_says_what_to_install(tmp_path):
    # A fresh environment with no TensorFlow: the build must stop with the message.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    src = _source_copy(tmp_path)
    result = _pip_wheel(python, src, tmp_path / "wheels")
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "tf_ring: TensorFlow must be installed before building" in output, output[-4000:]
    assert python in output or str(venv) in output, output[-4000:]
    assert "pip install tensorflow-cpu" in output


def test_sdist_carries_the_sources(tmp_path):
    import tarfile

    src = _source_copy(tmp_path)
    result = subprocess.run([sys.executable, "setup.py", "-q", "sdist", "-d", str(tmp_path / "dist")],
                            cwd=str(src), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    (sdist,) = (tmp_path / "dist").glob("tf_ring-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = [name.split("/", 1)[1] for name in archive.getnames() if "/" in name]
    expected = {os.path.relpath(os.path.join(d, f), REPO)
                for d, _, files in os.walk(os.path.join(REPO, "cc")) for f in files
                if f.endswith((".cc", ".h"))}
    assert expected and expected <= set(names), sorted(expected - set(names))
    assert {"pyproject.toml", "setup.py", "README.md"} <= set(names)
