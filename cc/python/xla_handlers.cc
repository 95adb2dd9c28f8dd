// The XLA custom-call handlers as capsules for jax.ffi.register_ffi_target:
// present in an engine-only library built where JAX is installed (build.sh;
// cc/xla_ops exports them there), an empty dict otherwise. tf_ring's own
// library registers its handlers with TensorFlow's XLA when it loads.
#include "python/binding.h"

#ifdef TF_RING_XLA_EXPORTED_HANDLERS
// cc/xla_ops/{ffi,gpu_ffi}_handlers.cc; the binding needs only their addresses.
extern "C" {
struct XLA_FFI_Error;
struct XLA_FFI_CallFrame;
XLA_FFI_Error* tf_ring_xla_host_collective(XLA_FFI_CallFrame* frame);
#ifdef TF_RING_CUDA
XLA_FFI_Error* tf_ring_xla_cuda_collective(XLA_FFI_CallFrame* frame);
#endif
}
#endif

namespace tf_ring {
namespace python {

void RegisterXlaHandlers(py::module_& m) {
  m.def(
      "xla_handlers",
      [] {
        py::dict handlers;
#ifdef TF_RING_XLA_EXPORTED_HANDLERS
        handlers["cpu"] = py::capsule(reinterpret_cast<void*>(&tf_ring_xla_host_collective));
#ifdef TF_RING_CUDA
        handlers["CUDA"] = py::capsule(reinterpret_cast<void*>(&tf_ring_xla_cuda_collective));
#endif
#endif
        return handlers;
      },
      "{JAX platform: capsule of the XLA FFI handler}; empty unless built with JAX's FFI headers.");
}

}  // namespace python
}  // namespace tf_ring
