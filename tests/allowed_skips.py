"""The one list of tests that may skip in a whole run (docs/testing.md).

On this project's machines (and CI's) these tests cannot run anywhere: there
is no GPU, and JAX is not installed. Every other skip in the whole suite,
or in any run with CI=true, fails the session (tests/conftest.py), naming
the test and its reason: a CI machine where network namespaces cannot be
made would otherwise skip the whole multi-host tier and still be green.

Each entry: a test id pattern (fnmatch, from the repository root), a
pattern its skip reason must match in full (re.fullmatch, so a different
reason from the same test is still unexpected), and why it may skip.
"""
import fnmatch
import re

ALLOWED = [
    ("tests/gpu/test_gpu.py::*", r"no GPU test possible: .+|no CUDA GPU on this machine .+",
     "the GPU tier needs a CUDA GPU and PyTorch; it runs on the GPU machine "
     "(tests/gpu/run_on_device.sh)"),
    ("tests/gpu/test_xla_gpu.py::*", r"TensorFlow sees no GPU here",
     "the XLA CUDA handler needs a GPU TensorFlow sees and a CUDA build; GPU machine only"),
    ("tests/builds/test_engine_only.py::test_xla_handlers_inside_a_jax_jit_program_on_host_arrays[[]*",
     r"JAX is not installed here: .+",
     "the engine-only library's XLA handlers run through jax.ffi; CI installs no JAX"),
]


def is_allowed(nodeid, reason):
    return any(fnmatch.fnmatchcase(nodeid, pattern) and re.fullmatch(why, reason, re.S)
               for pattern, why, _ in ALLOWED)


def unexpected(skips):
    """The (test id, reason) pairs of `skips` that ALLOWED does not cover."""
    return [(nodeid, reason) for nodeid, reason in skips if not is_allowed(nodeid, reason)]
