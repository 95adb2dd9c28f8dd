"""The engine-only library (tf_ring_engine: no TensorFlow) on host arrays.

Builds the CPU variant with tf_ring_engine/build.sh (incremental, in build/)
and runs the GPU test suite's jobs in host mode on 2 and 3 ranks: the same
tests the GPU machine runs over NCCL, here over MPI, which checks the
binding and the tests themselves on every CI run.
"""
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gpu"))

import jobs  # noqa: E402
from conftest import REPO, run_under_launcher  # noqa: E402

LIB = os.path.join(REPO, "build", "engine-cpu-test", "_tf_ring_engine.so")


@pytest.fixture(scope="module")
def engine_lib():
    env = dict(os.environ, ENGINE_LIB=LIB, BUILD_DIR=os.path.join(REPO, "build", "engine-cpu-test"))
    result = subprocess.run(["bash", os.path.join(REPO, "tf_ring_engine", "build.sh"), "--cpu"],
                            capture_output=True, text=True, env=env, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    return LIB


def _run_in_one_process(engine_lib, code):
    """Runs `code` in one plain Python process (no launcher) against the engine-only library."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, **jobs.job_env("cpu", engine_lib)), cwd=REPO)


@pytest.mark.parametrize("np", [2, 3])
def test_engine_only_collectives_on_host_arrays(engine_lib, np):
    jobs.run_collectives(run_under_launcher, np, "cpu", engine_lib)


@pytest.mark.parametrize("np", [2, 3])
def test_xla_handlers_inside_a_jax_jit_program_on_host_arrays(engine_lib, np):
    """The XLA custom call's Host handler through jax.ffi (build.sh adds the
    handlers where this Python has JAX; CI's has none)."""
    pytest.importorskip("jax", reason="JAX is not installed here: the handlers run through jax.ffi where it is")
    jobs.run_collectives(run_under_launcher, np, "cpu", engine_lib, test_file="mpi_xla_jax.py",
                         extra_env=jobs.JAX_ENV)


def test_engine_only_dead_rank_ends_the_job(engine_lib):
    jobs.run_dead_rank(run_under_launcher, 2, "cpu", engine_lib)


def test_engine_only_shutdown_with_work_in_flight(engine_lib):
    jobs.run_shutdown_in_flight(run_under_launcher, 3, "cpu", engine_lib)


def test_a_cpu_build_refuses_device_tensors_clearly(engine_lib):
    code = ("import numpy as np, tf_ring_engine as e\n"
            "assert not e.gpu_built()\n"
            "e.init()\n"
            "class CudaArray:  # what the binding would take from DLPack; never reached\n"
            "    def __dlpack__(self, stream=None):\n"
            "        raise AssertionError('a CPU build must refuse before exporting')\n"
            "try:\n"
            "    e.ENGINE.submit(e.ALLREDUCE, e.Sum, e.DTYPES['float32'], 'x', CudaArray(), CudaArray(), 0)\n"
            "except RuntimeError as err:\n"
            "    print(type(err).__name__, err)\n")
    result = _run_in_one_process(engine_lib, code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("RuntimeError this tf_ring was built without CUDA"), result.stdout


def test_a_group_that_names_a_tensor_twice_is_refused_whole(engine_lib):
    """A group of 301 whose last name repeats its first is refused by name,
    and nothing of it stays queued: the same names then run."""
    code = ("import numpy as np, tf_ring_engine as e\n"
            "e.init()\n"
            "x = np.arange(4, dtype=np.float32)\n"
            "names = ['g%d' % i for i in range(300)] + ['g0']\n"
            "e.ENGINE.group_begin(0)\n"
            "for name in names:\n"
            "    e.ENGINE.submit(e.ALLREDUCE, e.Sum, e.DTYPES['float32'], name, x, np.empty_like(x))\n"
            "try:\n"
            "    e.ENGINE.group_end()\n"
            "except RuntimeError as err:\n"
            "    print(err)\n"
            "for name in ('g0', 'g299'):\n"
            "    assert (e.allreduce(x, op=e.Sum, name=name).wait(60) == x).all()\n"
            "print('ran after')\n")
    result = _run_in_one_process(engine_lib, code)
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.splitlines()[:2]
    assert "tensor 'g0': a collective with this name is already in flight" in first, result.stdout
    assert second == "ran after", result.stdout


@pytest.mark.parametrize("np", [2, 3])
def test_a_pending_dropped_before_the_peers_submit_keeps_its_buffers(engine_lib, np):
    """Rank 0 drops every collective's Pending before the others submit:
    nothing is written into freed memory and every result is right."""
    script = os.path.join(REPO, "tests", "engine_jobs", "dropped_pending.py")
    result = run_under_launcher(np, [sys.executable, script], timeout=300, env=jobs.job_env("cpu", engine_lib))
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-8000:]
    assert out.count("dropped pendings all right") == np, out[-8000:]
