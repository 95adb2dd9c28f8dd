"""tf_ring's engine without TensorFlow: a ctypes binding over
libtf_ring_engine.so (built by tf_ring_engine/build.sh).

It exists to test and benchmark the engine, including its NCCL path, on
machines that have no TensorFlow. Tensors are NumPy arrays (host memory) or
CUDA arrays from PyTorch or CuPy (device memory; the producer's current
stream is passed to the engine, which waits on it). Each op returns a
`Pending`; `.wait()` returns the result as the same kind of array.

    import tf_ring_engine as e
    e.init()
    y = e.allreduce(x, op=e.Sum, name="x").wait()
"""
import atexit
import ctypes
import os

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
LIBRARY_PATH = os.environ.get("TF_RING_ENGINE_LIB") or os.path.join(_HERE, "libtf_ring_engine.so")

# The engine's enums (cc/common/base/message.h, cc/common/base/dtype.h).
ALLREDUCE, ALLGATHER, BROADCAST, ALLTOALL, REDUCESCATTER, JOIN = 0, 1, 2, 3, 4, 5
Sum, Average, Min, Max, Product = 0, 1, 2, 3, 4
DTYPES = {"uint8": 0, "int8": 1, "int32": 2, "int64": 3, "float16": 4, "bfloat16": 5, "float32": 6,
          "float64": 7, "bool": 8}
JOIN_NAME = "tf_ring.join"  # the join kernel's tensor name (cc/tensorflow/join_kernel.cc)


class EngineError(RuntimeError):
    """A collective failed; the message is the engine's."""


def _load():
    if not os.path.exists(LIBRARY_PATH):
        raise ImportError("tf_ring_engine: %s is not built; run tf_ring_engine/build.sh" % LIBRARY_PATH)
    # RTLD_GLOBAL: MPI's plugins resolve symbols of libmpi through the global scope.
    lib = ctypes.CDLL(LIBRARY_PATH, mode=ctypes.RTLD_GLOBAL)
    c = ctypes
    lib.tf_ring_init.argtypes = [c.c_void_p, c.c_char_p, c.c_int]
    lib.tf_ring_init.restype = c.c_int
    lib.tf_ring_shutdown.argtypes = []
    lib.tf_ring_finalize_mpi.argtypes = []
    lib.tf_ring_topology.argtypes = [c.POINTER(c.c_int)]
    lib.tf_ring_topology.restype = c.c_int
    lib.tf_ring_stats.argtypes = [c.POINTER(c.c_int64), c.c_int]
    lib.tf_ring_stats.restype = c.c_int
    lib.tf_ring_reset_stats.argtypes = []
    lib.tf_ring_device_support.restype = c.c_int
    lib.tf_ring_submit.argtypes = [c.c_int, c.c_int, c.c_int, c.c_char_p, c.POINTER(c.c_int64), c.c_int,
                                   c.c_void_p, c.c_void_p, c.c_int, c.c_void_p, c.c_int, c.c_double,
                                   c.c_double, c.POINTER(c.c_int64), c.c_int, c.c_char_p, c.c_int]
    lib.tf_ring_submit.restype = c.c_int64
    lib.tf_ring_group_begin.argtypes = []
    lib.tf_ring_group_end.argtypes = [c.c_char_p, c.c_int]
    lib.tf_ring_group_end.restype = c.c_int
    lib.tf_ring_wait.argtypes = [c.c_int64, c.c_double, c.c_char_p, c.c_int]
    lib.tf_ring_wait.restype = c.c_int
    lib.tf_ring_output.argtypes = [c.c_int64, c.c_int, c.POINTER(c.c_void_p), c.POINTER(c.c_int64), c.c_int,
                                   c.POINTER(c.c_int)]
    lib.tf_ring_output.restype = c.c_int
    lib.tf_ring_release.argtypes = [c.c_int64]
    return lib


LIB = _load()
_ERROR_LEN = 4096
_counter = [0]


def init():
    err = ctypes.create_string_buffer(_ERROR_LEN)
    if LIB.tf_ring_init(None, err, _ERROR_LEN) != 0:
        raise EngineError(err.value.decode())
    if not _finalizer_registered:
        atexit.register(LIB.tf_ring_finalize_mpi)  # MPI must be finalized before exit
        _finalizer_registered.append(True)


_finalizer_registered = []


def shutdown():
    LIB.tf_ring_shutdown()


def finalize():
    """Shuts down and finalizes MPI (call once, at the end of the process)."""
    LIB.tf_ring_finalize_mpi()


def _topology():
    out = (ctypes.c_int * 7)()  # tf_ring_topology writes 7 values (c_api.cc)
    if LIB.tf_ring_topology(out) != 0:
        raise EngineError("tf_ring_engine is not initialized: call init() first")
    return list(out)


def rank():
    return _topology()[0]


def size():
    return _topology()[1]


def local_rank():
    return _topology()[2]


def gpu_built():
    """True when the library was built with the CUDA/NCCL transport."""
    return LIB.tf_ring_device_support() == 1


STAT_NAMES = ("cycles", "negotiations", "cache_hits", "cache_misses", "fused_batches", "tensors", "bytes")


def stats():
    out = (ctypes.c_int64 * 7)()
    n = LIB.tf_ring_stats(out, 7)
    return dict(zip(STAT_NAMES[:n], list(out)[:n]))


def reset_stats():
    LIB.tf_ring_reset_stats()


# --- arrays: NumPy on the host, PyTorch or CuPy on a GPU --------------------

class _Array:
    """What the engine needs to know about one array, and how to make more
    arrays of its kind."""

    def __init__(self, x):
        self.obj = x
        module = type(x).__module__.split(".")[0]
        if module == "torch":
            import torch
            self.kind = "torch"
            self.dtype = str(x.dtype).replace("torch.", "")
            self.shape = tuple(x.shape)
            self.device = x.device.index if x.is_cuda else -1
            if self.device >= 0 and not x.is_contiguous():
                raise ValueError("tf_ring_engine: the tensor must be contiguous")
            self.ptr = x.data_ptr()
            self.stream = torch.cuda.current_stream(x.device).cuda_stream if self.device >= 0 else None
            self.torch = torch
        elif module == "cupy":
            import cupy
            self.kind = "cupy"
            self.dtype = x.dtype.name
            self.shape = tuple(x.shape)
            self.device = x.device.id
            self.ptr = x.data.ptr
            self.stream = cupy.cuda.get_current_stream().ptr
            self.cupy = cupy
        else:
            x = np.ascontiguousarray(x)
            self.obj = x
            self.kind = "numpy"
            self.dtype = x.dtype.name
            self.shape = x.shape
            self.device = -1
            self.ptr = x.ctypes.data
            self.stream = None
        if self.dtype not in DTYPES:
            raise TypeError("tf_ring_engine: dtype %s is not supported" % self.dtype)
        if self.kind == "torch" and self.device < 0:
            # Host torch tensors go through NumPy views of the same memory.
            self.kind = "torch-cpu"

    def empty_like(self):
        if self.kind == "numpy":
            return np.empty_like(self.obj)
        if self.kind.startswith("torch"):
            return self.torch.empty_like(self.obj)
        return self.cupy.empty_like(self.obj)

    @staticmethod
    def ptr_of(x):
        if type(x).__module__.startswith("torch"):
            return x.data_ptr()
        if type(x).__module__.startswith("cupy"):
            return x.data.ptr
        return x.ctypes.data

    def wrap_output(self, handle, index, dtype_name, as_numpy=False):
        """Output `index` of `handle` (engine-allocated) as an array of this
        kind (a NumPy array for host outputs with `as_numpy`)."""
        data = ctypes.c_void_p()
        shape = (ctypes.c_int64 * 16)()
        on_device = ctypes.c_int()
        ndims = LIB.tf_ring_output(handle.id, index, ctypes.byref(data), shape, 16, ctypes.byref(on_device))
        if ndims < 0:
            raise EngineError("no output %d for tensor '%s'" % (index, handle.name))
        dims = tuple(shape[:ndims])
        np_dtype = _np_dtype(dtype_name)
        if self.kind == "numpy" and dtype_name == self.dtype:
            np_dtype = self.obj.dtype  # keeps extension dtypes (ml_dtypes.bfloat16)
        count = int(np.prod(dims)) if dims else 1
        nbytes = count * np_dtype.itemsize
        if not on_device.value:
            buf = (ctypes.c_char * max(nbytes, 1)).from_address(data.value or 0) if nbytes else b""
            host = np.frombuffer(bytes(buf)[:nbytes], dtype=np_dtype).reshape(dims).copy()
            if self.kind.startswith("torch") and not as_numpy:
                return _torch_from_numpy(self.torch, host, dtype_name)
            return host
        # Device memory owned by the handle: keep the handle alive with the array.
        owner = _DeviceBytes(data.value, nbytes, self.device, handle)
        if self.kind == "cupy":
            mem = self.cupy.cuda.UnownedMemory(data.value, nbytes, owner, self.device)
            ptr = self.cupy.cuda.MemoryPointer(mem, 0)
            return self.cupy.ndarray(dims, dtype=np_dtype if dtype_name != "bfloat16" else "uint16", memptr=ptr)
        raw = self.torch.as_tensor(owner, device="cuda:%d" % self.device)
        out = raw.view(getattr(self.torch, dtype_name)).reshape(dims)
        out._tf_ring_owner = owner  # noqa: SLF001 - keeps the engine buffer alive
        return out


def _np_dtype(name):
    if name == "bfloat16":
        return np.dtype("uint16")  # same bytes; NumPy has no bfloat16
    return np.dtype(name)


def _torch_from_numpy(torch, host, dtype_name):
    if dtype_name == "bfloat16":
        return torch.from_numpy(host.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(host)


class _DeviceBytes:
    """Raw device bytes as a __cuda_array_interface__ object; releasing the
    last reference frees the engine's allocation."""

    def __init__(self, ptr, nbytes, device, handle):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr or 0, False),
                                         "version": 3, "strides": None, "stream": None}
        self.handle = handle
        self.handle.keep()


class Pending:
    """One submitted collective. wait() returns its result."""

    def __init__(self, hid, name, array, finish):
        self.id = hid
        self.name = name
        self.array = array
        self._finish = finish
        self._refs = 0
        self._released = False
        self._result = None
        self._done = False

    def keep(self):
        self._refs += 1

    def wait(self, timeout=None):
        if self._done:
            return self._result
        err = ctypes.create_string_buffer(_ERROR_LEN)
        rc = LIB.tf_ring_wait(self.id, -1.0 if timeout is None else float(timeout), err, _ERROR_LEN)
        if rc == 2:
            raise TimeoutError("tensor '%s' not done after %s s" % (self.name, timeout))
        if rc != 0:
            self._release()
            raise EngineError(err.value.decode() or "handle %d unknown" % self.id)
        self._result = self._finish(self)
        self._done = True
        if self._refs == 0:
            self._release()
        return self._result

    def _release(self):
        if not self._released:
            self._released = True
            LIB.tf_ring_release(self.id)

    def __del__(self):
        # Only a finished handle may free its outputs (the engine writes them until done).
        if self._done or self._released:
            try:
                self._release()
            except Exception:  # interpreter teardown
                pass


def _name(prefix, name):
    if name is not None:
        return name
    _counter[0] += 1
    return "%s.noname.%d" % (prefix, _counter[0])


def _submit(op, x, name, output=None, reduce_op=Sum, root=0, prescale=1.0, postscale=1.0, splits=None,
            finish=None):
    a = _Array(x)
    shape = (ctypes.c_int64 * max(len(a.shape), 1))(*a.shape)
    split_arr = None
    if splits is not None:
        splits = [int(s) for s in splits]
        split_arr = (ctypes.c_int64 * len(splits))(*splits)
    out_ptr = _Array.ptr_of(output) if output is not None else None
    err = ctypes.create_string_buffer(_ERROR_LEN)
    hid = LIB.tf_ring_submit(op, reduce_op, DTYPES[a.dtype], name.encode(), shape, len(a.shape),
                             ctypes.c_void_p(a.ptr), ctypes.c_void_p(out_ptr) if out_ptr else None,
                             a.device, ctypes.c_void_p(a.stream) if a.stream else None, root,
                             float(prescale), float(postscale), split_arr, len(splits or []), err, _ERROR_LEN)
    if hid == 0:
        raise EngineError(err.value.decode())
    p = Pending(hid, name, a, finish)
    p.input = x  # the engine reads it until done
    p.output = output
    return p


def allreduce(x, op=Average, name=None, prescale=1.0, postscale=1.0, output=None):
    name = _name("allreduce", name)
    out = output if output is not None else _Array(x).empty_like()
    return _submit(ALLREDUCE, x, name, output=out, reduce_op=op, prescale=prescale, postscale=postscale,
                   finish=lambda p: p.output)


def broadcast(x, root_rank, name=None):
    name = _name("broadcast", name)
    out = _Array(x).empty_like()
    return _submit(BROADCAST, x, name, output=out, root=root_rank, finish=lambda p: p.output)


def allgather(x, name=None):
    name = _name("allgather", name)
    return _submit(ALLGATHER, x, name, finish=lambda p: p.array.wrap_output(p, 0, p.array.dtype))


def reducescatter(x, op=Average, name=None, prescale=1.0, postscale=1.0):
    name = _name("reducescatter", name)
    return _submit(REDUCESCATTER, x, name, reduce_op=op, prescale=prescale, postscale=postscale,
                   finish=lambda p: p.array.wrap_output(p, 0, p.array.dtype))


def alltoall(x, splits=None, name=None):
    """Returns (received rows, received splits as a host int32 array)."""
    name = _name("alltoall", name)
    if splits is None:
        n = size()
        rows = _Array(x).shape[0]
        if rows % n:
            raise ValueError("alltoall of '%s': %d rows do not split evenly over %d ranks; pass splits"
                             % (name, rows, n))
        splits = [rows // n] * n
    return _submit(ALLTOALL, x, name, splits=splits,
                   finish=lambda p: (p.array.wrap_output(p, 0, p.array.dtype),
                                     p.array.wrap_output(p, 1, "int32", as_numpy=True)))


def join():
    """Returns the last rank to join, once every rank has joined."""
    out = np.zeros((), dtype=np.int32)
    x = np.zeros((), dtype=np.int32)
    p = _submit(JOIN, x, JOIN_NAME, output=out, finish=lambda p: int(p.output))
    return p.wait()


def grouped_allreduce(tensors, op=Average, name=None, prescale=1.0, postscale=1.0):
    """One Pending per tensor, negotiated and fused together."""
    base = _name("grouped_allreduce", name)
    LIB.tf_ring_group_begin()
    pending = []
    try:
        for i, x in enumerate(tensors):
            pending.append(allreduce(x, op=op, name="%s.%d" % (base, i), prescale=prescale, postscale=postscale))
    finally:
        err = ctypes.create_string_buffer(_ERROR_LEN)
        rc = LIB.tf_ring_group_end(err, _ERROR_LEN)
    if rc != 0:
        raise EngineError(err.value.decode())
    return pending
