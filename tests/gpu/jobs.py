"""The engine-only jobs, shared by test_gpu.py (GPU, NCCL) and
tests/builds/test_engine_only.py (host arrays, MPI): each runs under tfringrun on
`np` ranks and checks the outcome."""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def job_env(device, lib=None):
    # Without TensorFlow, launcher included, wherever they run: as on the GPU machine.
    env = {"PYTHONPATH": os.pathsep.join([os.path.join(HERE, "without_tensorflow"), HERE, REPO,
                                          os.environ.get("PYTHONPATH", "")]),
           "TF_RING_ENGINE_TEST_DEVICE": device}
    if lib:
        env["TF_RING_ENGINE_LIB"] = lib
    return env


def launcher_flags(device):
    return ["--share-gpu"] if device == "cuda" else []


# The JAX job's ranks share one GPU: JAX would otherwise take 75% of it each.
JAX_ENV = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}


def run_collectives(run_under_launcher, np, device, lib=None, test_file="mpi_gpu_collectives.py",
                    extra_env=None):
    env = dict(job_env(device, lib), **(extra_env or {}))
    result = run_under_launcher(
        np, launcher_flags(device) + [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                      "-p", "gpu_rank_plugin", "-o", "python_files=mpi_*.py", "-x",
                                      os.path.join(HERE, test_file)],
        timeout=900, env=env)
    assert result.returncode == 0, result.stdout[-20000:] + result.stderr[-5000:]
    assert result.stdout.count(" passed") == np, result.stdout[-4000:]
    if device == "cuda":
        # On a GPU every test must run: a skip there (CuPy missing, say) hides a path.
        assert " skipped" not in result.stdout, result.stdout[-4000:]
    return result


def run_dead_rank(run_under_launcher, np, device, lib=None):
    start = time.monotonic()
    result = run_under_launcher(np, launcher_flags(device) + [sys.executable, os.path.join(HERE, "gpu_dead_rank.py")],
                                timeout=180, env=job_env(device, lib))
    elapsed = time.monotonic() - start
    out = result.stdout + result.stderr
    assert out.count("warm-up done") == np, out[-4000:]
    assert result.returncode != 0, out[-4000:]
    assert "rank %d exited with code 7" % (np - 1) in out, out[-4000:]
    assert "returned without the dead rank" not in out, out[-4000:]
    assert elapsed < 60, "the job took %.0f s to end after a rank died" % elapsed
    return elapsed


def run_shutdown_in_flight(run_under_launcher, np, device, lib=None):
    result = run_under_launcher(np, launcher_flags(device) + [sys.executable,
                                                              os.path.join(HERE, "gpu_shutdown_in_flight.py")],
                                timeout=300, env=job_env(device, lib))
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-6000:]
    assert out.count("shutdown with work in flight:") == np, out[-4000:]
    return result
