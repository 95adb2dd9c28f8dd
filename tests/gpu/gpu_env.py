"""What the engine-only tests run on, and array helpers for both cases.

On a GPU machine (the default, TF_RING_ENGINE_TEST_DEVICE=cuda) tensors are
PyTorch CUDA tensors and the engine moves them with NCCL. With
TF_RING_ENGINE_TEST_DEVICE=cpu the same tests use NumPy arrays and the MPI
path: that checks the tests' own logic on machines without a GPU.
"""
import os
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

DEVICE = os.environ.get("TF_RING_ENGINE_TEST_DEVICE", "cuda")
GPU = DEVICE == "cuda"


def unavailable_reason():
    """Why these tests cannot run here, or None."""
    lib = os.environ.get("TF_RING_ENGINE_LIB") or os.path.join(REPO, "tf_ring_engine", "_tf_ring_engine.so")
    if not GPU:
        return None if os.path.exists(lib) else "the engine-only library is not built (%s)" % lib
    try:
        import torch
    except ImportError:
        return "no GPU test possible: PyTorch is not installed (the GPU tests hold CUDA tensors in PyTorch)"
    if not torch.cuda.is_available():
        return "no CUDA GPU on this machine (torch.cuda.is_available() is False)"
    if not os.path.exists(lib):
        return "the engine-only library is not built: run tf_ring_engine/build.sh (%s)" % lib
    return None


def bfloat16_numpy():
    try:
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    except ImportError:
        return None


def to_device(a, dtype_name=None):
    """NumPy array `a` (any numeric dtype) as the test's array kind, in
    `dtype_name` (default: a's own dtype)."""
    dtype_name = dtype_name or a.dtype.name
    if GPU:
        import torch
        if dtype_name == "bfloat16":
            return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).to("cuda").to(torch.bfloat16)
        return torch.from_numpy(np.ascontiguousarray(a.astype(dtype_name))).to("cuda")
    if dtype_name == "bfloat16":
        return np.ascontiguousarray(a.astype(np.float32).astype(bfloat16_numpy()))
    return np.ascontiguousarray(a.astype(dtype_name))


def to_numpy(x):
    """Back to NumPy (bfloat16 as float32, exactly)."""
    if type(x).__module__.startswith("torch"):
        import torch
        if x.dtype == torch.bfloat16:
            x = x.to(torch.float32)
        return x.detach().cpu().numpy()
    x = np.asarray(x)
    if x.dtype.name == "bfloat16":
        return x.astype(np.float32)
    return x


def bits(x):
    """The raw bytes of `x`, for bit-for-bit comparisons."""
    if type(x).__module__.startswith("torch"):
        import torch
        if x.dtype == torch.bfloat16:
            x = x.view(torch.int16)
        return x.detach().cpu().numpy().tobytes()
    return np.asarray(x).tobytes()


def synchronize():
    if GPU:
        import torch
        torch.cuda.synchronize()
