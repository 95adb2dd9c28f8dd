"""tf_ring's engine without TensorFlow: the pybind11 module _tf_ring_engine.so
(built by tf_ring_engine/build.sh from the engine and cc/python/).

It exists to test and benchmark the engine, including its NCCL path, on
machines that have no TensorFlow. Tensors are NumPy arrays (host memory,
through the buffer protocol) or CUDA arrays from PyTorch or CuPy (device
memory, through DLPack: the producer orders its pending work before the
stream the engine waits on). Each op returns a `Pending`; `.wait()` returns
the result as the same kind of array, with the GIL released while it waits.

    import tf_ring_engine as e
    e.init()
    y = e.allreduce(x, op=e.Sum, name="x").wait()
"""
import atexit
import importlib.util
import os
import sys

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
# TF_RING_ENGINE_LIB may also name tf_ring/_tf_ring.so: the same binding, beside TensorFlow's kernels.
LIBRARY_PATH = os.environ.get("TF_RING_ENGINE_LIB") or os.path.join(_HERE, "_tf_ring_engine.so")

# The engine's enums (cc/common/base/message.h, cc/common/base/dtype.h).
ALLREDUCE, ALLGATHER, BROADCAST, ALLTOALL, REDUCESCATTER, JOIN = 0, 1, 2, 3, 4, 5
Sum, Average, Min, Max, Product = 0, 1, 2, 3, 4
DTYPES = {"uint8": 0, "int8": 1, "int32": 2, "int64": 3, "float16": 4, "bfloat16": 5, "float32": 6,
          "float64": 7, "bool": 8, "uint16": 9, "int16": 10}
JOIN_NAME = "tf_ring.join"  # the join kernel's tensor name (cc/tensorflow/join_kernel.cc)


class EngineError(RuntimeError):
    """A collective failed; the message is the engine's."""


def _load():
    if not os.path.exists(LIBRARY_PATH):
        raise ImportError("tf_ring_engine: %s is not built; run tf_ring_engine/build.sh" % LIBRARY_PATH)
    # The module is named after its file: _tf_ring_engine, or _tf_ring for tf_ring's own library.
    name = os.path.basename(LIBRARY_PATH).split(".")[0]
    spec = importlib.util.spec_from_file_location(name, LIBRARY_PATH)
    module = importlib.util.module_from_spec(spec)
    # RTLD_GLOBAL: MPI's plugins resolve symbols of libmpi through the global scope.
    flags = sys.getdlopenflags()
    sys.setdlopenflags(flags | os.RTLD_GLOBAL)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.setdlopenflags(flags)
    return module


ENGINE = _load()
_counter = [0]
_finalizer_registered = []


def init():
    try:
        ENGINE.init()
    except RuntimeError as e:
        raise EngineError(str(e)) from None
    if not _finalizer_registered:
        atexit.register(ENGINE.finalize_mpi)  # MPI must be finalized before exit
        _finalizer_registered.append(True)


def shutdown():
    ENGINE.shutdown()


def finalize():
    """Shuts down and finalizes MPI (call once, at the end of the process)."""
    ENGINE.finalize_mpi()


def _topology():
    topology = ENGINE.topology()
    if topology is None:
        raise EngineError("tf_ring_engine is not initialized: call init() first")
    return topology


def rank():
    return _topology()["rank"]


def size():
    return _topology()["size"]


def local_rank():
    return _topology()["local_rank"]


def gpu_built():
    """True when the library was built with the CUDA/NCCL transport."""
    return ENGINE.device_support()


STAT_NAMES = ("cycles", "negotiations", "cache_hits", "cache_misses", "fused_batches", "tensors", "bytes",
              "hierarchical_batches", "caller_finished", "shm_small_chunk_batches", "shm_single_copy_batches",
              "scratch_bytes")


def stats():
    return ENGINE.stats()


def reset_stats():
    ENGINE.reset_stats()


def engine_params():
    """As tf_ring.engine_params(): fusion threshold, cycle time, autotune state
    and history, and rank 0's TF_RING_* settings, which every rank runs with."""
    return ENGINE.engine_params()


# --- arrays: NumPy on the host, PyTorch or CuPy on a GPU --------------------

class _Array:
    """What the engine needs to know about one array, and how to make more
    arrays of its kind."""

    def __init__(self, x):
        self.obj = x
        module = type(x).__module__.split(".")[0]
        if module == "torch":
            import torch
            import torch.utils.dlpack  # noqa: F401 - exported() uses it
            self.torch = torch
            self.kind = "torch" if x.is_cuda else "torch-cpu"
            self.dtype = str(x.dtype).replace("torch.", "")
            self.shape = tuple(x.shape)
            self.device = x.device.index if x.is_cuda else -1
            if not x.is_contiguous():
                raise ValueError("tf_ring_engine: the tensor must be contiguous")
        elif module == "cupy":
            import cupy
            self.cupy = cupy
            self.kind = "cupy"
            self.dtype = x.dtype.name
            self.shape = tuple(x.shape)
            self.device = x.device.id
        else:
            x = np.ascontiguousarray(x)
            self.obj = x
            self.kind = "numpy"
            self.dtype = x.dtype.name
            self.shape = x.shape
            self.device = -1
        if self.dtype not in DTYPES:
            raise TypeError("tf_ring_engine: dtype %s is not supported" % self.dtype)

    def empty_like(self):
        if self.kind == "numpy":
            return np.empty_like(self.obj)
        if self.kind.startswith("torch"):
            return self.torch.empty_like(self.obj)
        return self.cupy.empty_like(self.obj)

    def exported(self, x):
        """`x` (an array of this kind) as the binding takes it: a NumPy array
        of a buffer-protocol dtype on the host, the array itself (DLPack) on a GPU,
        or its DLPack capsule where PyTorch produces it on the legacy default stream."""
        if self.device >= 0:
            if self.kind == "torch" and _torch_on_legacy_stream(self.torch, self.device):
                # torch's __dlpack__(stream=1) would only confirm the stream, in
                # Python, for about half of a submit's 40 us (measured on an H100).
                return self.torch.utils.dlpack.to_dlpack(x)
            return x
        if self.kind == "torch-cpu":
            x = x.view(self.torch.int16) if self.dtype == "bfloat16" else x
            return x.numpy()  # shares the tensor's memory
        return x.view(np.uint16) if self.dtype == "bfloat16" else x

    def wrap_output(self, pending, index, dtype_name, as_numpy=False):
        """Output `index` of `pending` (engine-allocated) as an array of this
        kind (a NumPy array for host outputs with `as_numpy`)."""
        out = pending.handle.output(index)
        if out is None:
            raise EngineError("no output %d for tensor '%s'" % (index, pending.name))
        data, dims = out
        np_dtype = _np_dtype(dtype_name)
        if self.kind == "numpy" and dtype_name == self.dtype:
            np_dtype = self.obj.dtype  # keeps extension dtypes (ml_dtypes.bfloat16)
        if isinstance(data, bytes):
            host = np.frombuffer(data, dtype=np_dtype).reshape(dims).copy()
            if self.kind.startswith("torch") and not as_numpy:
                return _torch_from_numpy(self.torch, host, dtype_name)
            return host
        # Device memory owned by the handle: keep the handle alive with the array.
        nbytes = (int(np.prod(dims)) if dims else 1) * np_dtype.itemsize
        owner = _DeviceBytes(data, nbytes, pending)
        if self.kind == "cupy":
            mem = self.cupy.cuda.UnownedMemory(data, nbytes, owner, self.device)
            ptr = self.cupy.cuda.MemoryPointer(mem, 0)
            return self.cupy.ndarray(dims, dtype=np_dtype if dtype_name != "bfloat16" else "uint16", memptr=ptr)
        raw = self.torch.as_tensor(owner, device="cuda:%d" % self.device)
        out = raw.view(getattr(self.torch, dtype_name)).reshape(dims)
        out._tf_ring_owner = owner  # noqa: SLF001 - keeps the engine buffer alive
        return out


def _torch_on_legacy_stream(torch, device):
    """Whether PyTorch's current stream on `device` is the legacy default
    stream (handle 0), the one the engine's ready event is recorded on."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # noqa: SLF001 - the int, without a Stream object
    if raw is None:
        return torch.cuda.current_stream(device).cuda_stream == 0
    return raw(device) == 0


def _np_dtype(name):
    if name == "bfloat16":
        return np.dtype("uint16")  # same bytes; NumPy has no bfloat16
    return np.dtype(name)


def _torch_from_numpy(torch, host, dtype_name):
    if dtype_name == "bfloat16":
        return torch.from_numpy(host.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(host)


class _DeviceBytes:
    """Raw device bytes as a __cuda_array_interface__ object; the engine's
    allocation is freed with the last reference to its handle."""

    def __init__(self, ptr, nbytes, pending):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr or 0, False),
                                         "version": 3, "strides": None, "stream": None}
        self.pending = pending


class Pending:
    """One submitted collective. wait() returns its result."""

    def __init__(self, handle, name, array, finish):
        self.handle = handle
        self.name = name
        self.array = array
        self._finish = finish
        self._result = None
        self._done = False

    def wait(self, timeout=None):
        if self._done:
            return self._result
        try:
            done = self.handle.wait(None if timeout is None else float(timeout))
        except RuntimeError as e:
            raise EngineError(str(e)) from None
        if not done:
            raise TimeoutError("tensor '%s' not done after %s s" % (self.name, timeout))
        self._result = self._finish(self)
        self._done = True
        return self._result


def _name(prefix, name):
    if name is not None:
        return name
    _counter[0] += 1
    return "%s.noname.%d" % (prefix, _counter[0])


def _submit(op, x, name, output=None, reduce_op=Sum, root=0, prescale=1.0, postscale=1.0, splits=None,
            finish=None, process_set=0):
    a = _Array(x)
    exported = a.exported(a.obj)
    # In place: the very object twice, so the binding reads one DLPack export.
    exported_output = None if output is None else exported if output is x else a.exported(output)
    try:
        handle = ENGINE.submit(op, reduce_op, DTYPES[a.dtype], name, exported, exported_output, a.device, root,
                               float(prescale), float(postscale), [int(s) for s in splits or []],
                               int(process_set))
    except RuntimeError as e:
        raise EngineError(str(e)) from None
    p = Pending(handle, name, a, finish)
    p.input = x  # the engine reads it until done
    p.output = output
    return p
# Every collective takes `process_set`: 0 (every rank) or an id from
# add_process_set, whose members alone call it (root_rank stays a global rank).

def allreduce(x, op=Average, name=None, prescale=1.0, postscale=1.0, output=None, process_set=0):
    name = _name("allreduce", name)
    out = output if output is not None else _Array(x).empty_like()
    return _submit(ALLREDUCE, x, name, output=out, reduce_op=op, prescale=prescale, postscale=postscale,
                   finish=lambda p: p.output, process_set=process_set)


def broadcast(x, root_rank, name=None, process_set=0):
    name = _name("broadcast", name)
    out = _Array(x).empty_like()
    return _submit(BROADCAST, x, name, output=out, root=root_rank, finish=lambda p: p.output,
                   process_set=process_set)


def allgather(x, name=None, process_set=0):
    name = _name("allgather", name)
    return _submit(ALLGATHER, x, name, finish=lambda p: p.array.wrap_output(p, 0, p.array.dtype),
                   process_set=process_set)


def reducescatter(x, op=Average, name=None, prescale=1.0, postscale=1.0, process_set=0):
    name = _name("reducescatter", name)
    return _submit(REDUCESCATTER, x, name, reduce_op=op, prescale=prescale, postscale=postscale,
                   finish=lambda p: p.array.wrap_output(p, 0, p.array.dtype), process_set=process_set)


def alltoall(x, splits=None, name=None, process_set=0):
    """Returns (received rows, received splits as a host int32 array)."""
    name = _name("alltoall", name)
    if splits is None:
        n = len(process_set_ranks(process_set)) if process_set else size()
        rows = _Array(x).shape[0]
        if rows % n:
            raise ValueError("alltoall of '%s': %d rows do not split evenly over %d ranks; pass splits"
                             % (name, rows, n))
        splits = [rows // n] * n
    return _submit(ALLTOALL, x, name, splits=splits,
                   finish=lambda p: (p.array.wrap_output(p, 0, p.array.dtype),
                                     p.array.wrap_output(p, 1, "int32", as_numpy=True)),
                   process_set=process_set)


def join():
    """Returns the last rank to join, once every rank has joined."""
    out = np.zeros((), dtype=np.int32)
    x = np.zeros((), dtype=np.int32)
    p = _submit(JOIN, x, JOIN_NAME, output=out, finish=lambda p: int(p.output))
    return p.wait()


def add_process_set(ranks):
    """Registers a process set of `ranks` (global ranks) on every rank (all
    call it, members or not); returns its id for the collectives' `process_set`."""
    try:
        return ENGINE.add_process_sets([[int(r) for r in ranks]])[0]
    except RuntimeError as e:  # a ValueError (bad or disagreeing ranks) stays one
        raise EngineError(str(e)) from None


def remove_process_set(process_set):
    """Removes the set with this id (every rank calls it)."""
    try:
        ENGINE.remove_process_set(int(process_set))
    except RuntimeError as e:
        raise EngineError(str(e)) from None


def process_set_ranks(process_set):
    """The global ranks of a registered set (0: every rank)."""
    if not process_set:
        return list(range(size()))
    ranks = ENGINE.process_set_ranks(int(process_set))
    if ranks is None:
        raise EngineError("process set %d is not registered" % process_set)
    return ranks


def grouped_allreduce(tensors, op=Average, name=None, prescale=1.0, postscale=1.0, outputs=None,
                      process_set=0):
    """One Pending per tensor, negotiated and fused together. `outputs`: one
    array per tensor to write the results into (a tensor itself: in place),
    as allreduce's `output`."""
    base = _name("grouped_allreduce", name)
    tensors = list(tensors)
    outputs = [None] * len(tensors) if outputs is None else list(outputs)
    if len(outputs) != len(tensors):
        raise ValueError("tf_ring_engine.grouped_allreduce '%s': %d outputs for %d tensors"
                         % (base, len(outputs), len(tensors)))
    ENGINE.group_begin(int(process_set))
    pending = []
    try:
        for i, (x, out) in enumerate(zip(tensors, outputs)):
            pending.append(allreduce(x, op=op, name="%s.%d" % (base, i), prescale=prescale, postscale=postscale,
                                     output=out, process_set=process_set))
    finally:
        try:
            ENGINE.group_end()
        except RuntimeError as e:
            raise EngineError(str(e)) from None
    return pending
