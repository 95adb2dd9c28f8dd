// The body of tf_ring's XLA custom call, shared by the platform handlers
// ("Host" in ffi_handlers.cc, "CUDA" in gpu_ffi_handlers.cc): it submits
// the call's operands to the same background engine the TensorFlow kernels
// use and blocks until the engine is done. One call carries a whole group,
// so a step's gradients are negotiated and fused together (a blocking call
// per tensor would serialize them).
#ifndef TF_RING_XLA_OPS_FFI_COLLECTIVE_H_
#define TF_RING_XLA_OPS_FFI_COLLECTIVE_H_

#include <functional>
#include <string_view>

#include "common/base/status.h"
#include "xla/ffi/api/c_api.h"
#include "xla/ffi/api/ffi.h"

namespace xla {
namespace ffi {
// Exported by libtensorflow_cc.so.2; declared here so that the handlers
// need not pull in XLA's internal ffi_api.h.
const XLA_FFI_Api* GetXlaFfiApi();
}  // namespace ffi
}  // namespace xla

namespace tf_ring {
namespace xla_ops {

// Where a GPU handler's buffers live; null for the host.
struct XlaDevice {
  int ordinal = 0;
  void* stream = nullptr;  // XLA's cudaStream_t for this call
  // Writes 0 to the call's chain result, a device int32, on `stream`.
  std::function<Status(void* chain)> clear_chain;
};

// config keys: op (engine OpType), name, dtypes (engine dtypes, comma
// separated, one per operand), reduce_op, prescale, postscale, root,
// process_set, static (1: outputs sized at compile time), set_size (the
// process set's size when compiled; alltoall's equal split).
::xla::ffi::Error RunCollective(::xla::ffi::RemainingArgs args, ::xla::ffi::RemainingRets rets,
                                std::string_view config, const XlaDevice* device);

}  // namespace xla_ops
}  // namespace tf_ring

#endif  // TF_RING_XLA_OPS_FFI_COLLECTIVE_H_
