"""tf_ring's XLA custom-call handlers (cc/xla_ops: what TensorFlow's XLA
runs for jit_compile) inside a jax.jit program, on every rank: on a GPU the
"CUDA" handler (XLA's stream, the ready event, NCCL), with host arrays the
"Host" one. Run by test_gpu.py and tests/builds/test_engine_only.py where JAX is
installed; expected values come from NumPy on each rank.
"""
import os

import numpy as np
import pytest

import gpu_env

_reason = gpu_env.unavailable_reason()
try:
    import jax
except ImportError:
    _reason = _reason or "JAX is not installed: the XLA handlers are run through jax.ffi where it is"
if _reason:
    pytest.skip(_reason, allow_module_level=True)

import tf_ring_engine as e  # noqa: E402
import tf_ring_engine.xla as xla  # noqa: E402

if not xla.handlers_built():
    pytest.skip("%s was built without JAX's FFI headers" % e.LIBRARY_PATH, allow_module_level=True)

jax.config.update("jax_platforms", "cuda" if gpu_env.GPU else "cpu")
import jax.numpy as jnp  # noqa: E402

PLATFORMS = xla.register()


def rank_input(r, shape, seed):
    return np.random.default_rng(1000 * seed + r).integers(-3, 4, size=shape).astype(np.float32)


def test_the_handler_for_this_platform_is_registered():
    want = "CUDA" if gpu_env.GPU else "cpu"
    assert want in PLATFORMS, PLATFORMS
    assert jax.devices()[0].platform == ("gpu" if gpu_env.GPU else "cpu")


def test_a_jitted_program_runs_its_collectives_through_the_engine():
    n, r = e.size(), e.rank()
    x = jnp.asarray(rank_input(r, (5, 3), 70))
    ys = [jnp.asarray(rank_input(r, (k + 2,), 71 + k)) for k in range(3)]

    @jax.jit
    def step(x, ys):
        chain = xla.new_chain()
        doubled = 2.0 * x  # XLA's own work before the call: the engine must wait for it
        total, chain = xla.allreduce(doubled, "jax.sum", chain=chain)
        mean, chain = xla.allreduce(x, "jax.mean", op=e.Average, chain=chain)
        grouped, chain = xla.grouped_allreduce(ys, "jax.group", chain=chain)
        root, chain = xla.broadcast(x, "jax.bcast", root_rank=n - 1, chain=chain)
        return total + 1.0, mean, grouped, root  # and after it: the result must be there

    xs = [rank_input(k, (5, 3), 70) for k in range(n)]
    for _ in range(3):  # the first run negotiates, the later ones hit the response cache
        e.reset_stats()
        total, mean, grouped, root = step(x, ys)
        np.testing.assert_array_equal(np.asarray(total), 2.0 * np.sum(xs, axis=0) + 1.0)
        np.testing.assert_allclose(np.asarray(mean), np.mean(xs, axis=0), rtol=1e-6)
        for k, g in enumerate(grouped):
            np.testing.assert_array_equal(np.asarray(g), np.sum([rank_input(q, (k + 2,), 71 + k)
                                                                 for q in range(n)], axis=0))
        np.testing.assert_array_equal(np.asarray(root), xs[n - 1])
    assert e.stats()["cache_hits"] == 6, e.stats()  # the last run: 6 tensors, all from the cache


def test_a_mismatch_inside_jit_fails_on_every_rank_naming_the_tensor():
    r = e.rank()

    @jax.jit
    def bad(x):
        out, _ = xla.allreduce(x, "jax.mismatch")
        return out

    with pytest.raises(Exception, match="jax.mismatch"):
        np.asarray(bad(jnp.zeros((r + 1,), jnp.float32)))
    # The engine goes on.
    ok, _ = jax.jit(lambda v: xla.allreduce(v, "jax.after"))(jnp.ones((2,), jnp.float32))
    np.testing.assert_array_equal(np.asarray(ok), np.full(2, float(e.size())))


if os.environ.get("TF_RING_XLA_JAX_DEBUG"):
    print("platforms", PLATFORMS, jax.devices())
