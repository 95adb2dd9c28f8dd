"""tf_ring's XLA custom call from JAX: the very handlers TensorFlow's XLA
runs for `jit_compile` (cc/xla_ops), registered with `jax.ffi`, so that a
`jax.jit` function's collectives go through the same engine and, on a GPU,
the same stream hand-off and NCCL path. It exists to run those handlers
where TensorFlow is not (the GPU machine has JAX, not TensorFlow); it is a
test vehicle, not a JAX API.

Needs the engine-only library built where JAX is installed (build.sh then
adds the handlers). Each call takes and returns a `chain`, an int32 scalar
that orders the calls inside one compiled program, as tf_ring's TensorFlow
kernels chain theirs: every rank must issue its collectives in one order,
and XLA would otherwise be free to reorder independent custom calls.

    import tf_ring_engine as e, tf_ring_engine.xla as xla
    e.init(); xla.register()

    @jax.jit
    def step(x, y):
        chain = xla.new_chain()
        x, chain = xla.allreduce(x, "x", chain=chain)
        (y,), chain = xla.grouped_allreduce([y], "y", chain=chain)
        return x, y
"""
import tf_ring_engine as e

TARGET = "tf_ring_collective"


def handlers_built():
    """The JAX platforms ("cpu", "CUDA") whose handler the library has."""
    return sorted(e.ENGINE.xla_handlers())


def register():
    """Registers the library's handlers with jax.ffi; returns their platforms."""
    import jax.ffi
    handlers = e.ENGINE.xla_handlers()
    if not handlers:
        raise RuntimeError("%s has no XLA handlers: rebuild it with tf_ring_engine/build.sh where JAX is "
                           "installed" % e.LIBRARY_PATH)
    for platform, capsule in handlers.items():
        jax.ffi.register_ffi_target(TARGET, capsule, platform=platform)
    return sorted(handlers)


def new_chain():
    import jax.numpy as jnp
    return jnp.zeros((), jnp.int32)


def _escape(text):
    """cc/xla_ops/backend_config.cc's escaping: the separators, quotes,
    backslashes and control characters as %XX."""
    out = []
    for c in str(text):
        if c in ';=%"\\' or ord(c) < 0x20 or ord(c) == 0x7F:
            out.append("%%%02X" % ord(c))
        else:
            out.append(c)
    return "".join(out)


def encode_config(config):
    """The handler's `config` attribute: key=value pairs joined by ';', in key order."""
    return ";".join("%s=%s" % (_escape(k), _escape(v)) for k, v in sorted(config.items()))


def _call(op, tensors, name, chain, grouped, **settings):
    import jax
    import jax.numpy as jnp
    dtypes = []
    for t in tensors:
        dtype = jnp.dtype(t.dtype).name
        if dtype not in e.DTYPES:
            raise TypeError("tf_ring_engine.xla: dtype %s of '%s' is not supported" % (dtype, name))
        dtypes.append(str(e.DTYPES[dtype]))
    config = dict(op=op, name=name, dtypes=",".join(dtypes), static="0", grouped="1" if grouped else "0",
                  reduce_op=settings.get("reduce_op", e.Sum), prescale=settings.get("prescale", 1.0),
                  postscale=settings.get("postscale", 1.0), process_set=settings.get("process_set", 0))
    if "root" in settings:
        config["root"] = settings["root"]
    results = [jax.ShapeDtypeStruct(t.shape, t.dtype) for t in tensors] + [jax.ShapeDtypeStruct((), jnp.int32)]
    outs = jax.ffi.ffi_call(TARGET, results, has_side_effect=True)(
        *tensors, new_chain() if chain is None else chain, config=encode_config(config))
    return list(outs[:-1]), outs[-1]


def allreduce(x, name, op=e.Sum, prescale=1.0, postscale=1.0, process_set=0, chain=None):
    """(the reduced x, the chain)."""
    (out,), chain = _call(e.ALLREDUCE, [x], name, chain, False, reduce_op=op, prescale=prescale,
                          postscale=postscale, process_set=process_set)
    return out, chain


def grouped_allreduce(xs, name, op=e.Sum, process_set=0, chain=None):
    """(the reduced tensors, negotiated and fused as one group; the chain)."""
    return _call(e.ALLREDUCE, list(xs), name, chain, True, reduce_op=op, process_set=process_set)


def broadcast(x, name, root_rank, process_set=0, chain=None):
    """(root_rank's x on every rank, the chain). root_rank is a global rank, a member of the set."""
    (out,), chain = _call(e.BROADCAST, [x], name, chain, False, root=root_rank, process_set=process_set)
    return out, chain
