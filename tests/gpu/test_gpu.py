"""tf_ring's engine on a GPU: every collective over NCCL, fusion, the
response cache, mismatch errors, join, a dead rank and shutdown with work
in flight, on 2 and 3 ranks sharing one GPU (tfringrun --share-gpu).

Needs a CUDA GPU, PyTorch and the engine-only library built with CUDA
(tf_ring_engine/build.sh); skips elsewhere, saying which is missing.
tests/gpu/run_on_device.sh builds and runs all of it on the GPU machine.
"""
import pytest

import gpu_env
import jobs
from conftest import run_under_launcher

REASON = gpu_env.unavailable_reason() if gpu_env.GPU else "TF_RING_ENGINE_TEST_DEVICE is not cuda"
pytestmark = pytest.mark.skipif(REASON is not None, reason=str(REASON))


def test_the_library_has_the_nccl_transport():
    import tf_ring_engine
    assert tf_ring_engine.gpu_built(), ("%s is a CPU build; rebuild with tf_ring_engine/build.sh --cuda"
                                        % tf_ring_engine.LIBRARY_PATH)


@pytest.mark.parametrize("np", [2, 3])
def test_collectives_on_gpu(np):
    jobs.run_collectives(run_under_launcher, np, "cuda")


@pytest.mark.parametrize("np", [2, 3])
def test_xla_handlers_inside_a_jax_jit_program_on_gpu(np):
    """The XLA custom call's CUDA handler (what jit_compile'd TensorFlow runs
    on a GPU), reached through jax.ffi: the GPU machine has JAX, not TensorFlow."""
    pytest.importorskip("jax", reason="JAX is not installed: the CUDA handler is run through jax.ffi")
    import tf_ring_engine.xla as xla
    assert "CUDA" in xla.handlers_built(), "the library was built without JAX's FFI headers"
    jobs.run_collectives(run_under_launcher, np, "cuda", test_file="mpi_xla_jax.py",
                         extra_env=jobs.JAX_ENV)


@pytest.mark.parametrize("np", [2, 3])
def test_a_dead_rank_ends_the_job(np):
    jobs.run_dead_rank(run_under_launcher, np, "cuda")


@pytest.mark.parametrize("np", [2, 3])
def test_shutdown_with_gpu_work_in_flight(np):
    jobs.run_shutdown_in_flight(run_under_launcher, np, "cuda")
