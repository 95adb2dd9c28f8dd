// CUDA builds only: the XLA typed-FFI handler for platform "CUDA", so that
// a jit_compile'd step on a GPU reaches the engine's NCCL path as the
// TensorFlow GPU kernels do. XLA hands the call its stream and device: the
// inputs are ready once that stream reaches the call (an event recorded
// here, which the NCCL stream waits on), and the call blocks until the
// collective has finished, so the stream's later work reads finished
// outputs. Compiled and type-checked in CI's CUDA build; it runs on a GPU
// machine with TensorFlow, or through JAX in the engine-only library
// (tests/gpu).
#include <cuda_runtime_api.h>

#include "xla_ops/ffi_collective.h"

namespace tf_ring {
namespace xla_ops {
namespace {

namespace ffi = ::xla::ffi;

ffi::Error CudaCollective(cudaStream_t stream, int32_t device_ordinal, ffi::RemainingArgs args,
                          ffi::RemainingRets rets, std::string_view config) {
  XlaDevice device;
  device.ordinal = device_ordinal;
  device.stream = stream;
  device.clear_chain = [stream](void* chain) {
    const cudaError_t rc = cudaMemsetAsync(chain, 0, sizeof(int32_t), stream);
    return rc == cudaSuccess ? Status::OK()
                             : Status::Unknown(std::string("tf_ring XLA call on the GPU: cudaMemsetAsync "
                                                           "of its chain result failed: ") +
                                               cudaGetErrorString(rc));
  };
  return RunCollective(args, rets, config, &device);
}

}  // namespace

XLA_FFI_DEFINE_HANDLER(kTfRingCudaCollective, CudaCollective,
                       ffi::Ffi::Bind()
                           .Ctx<ffi::PlatformStream<cudaStream_t>>()
                           .Ctx<ffi::DeviceOrdinal>()
                           .RemainingArgs()
                           .RemainingRets()
                           .Attr<std::string_view>("config"));

#ifdef TF_RING_XLA_EXPORTED_HANDLERS
// As for the Host handler (ffi_handlers.cc): exported, not registered.
extern "C" XLA_FFI_Error* tf_ring_xla_cuda_collective(XLA_FFI_CallFrame* frame) {
  return kTfRingCudaCollective(frame);
}
#else
XLA_FFI_REGISTER_HANDLER(::xla::ffi::GetXlaFfiApi(), "tf_ring_collective", "CUDA",
                         kTfRingCudaCollective);
#endif

}  // namespace xla_ops
}  // namespace tf_ring
