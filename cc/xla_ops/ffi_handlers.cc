// XLA typed-FFI handler for platform "Host": it runs on XLA's thread when a
// compiled program reaches a tf_ring custom call (ffi_collective.h).
#include "xla_ops/ffi_collective.h"

namespace tf_ring {
namespace xla_ops {
namespace {

namespace ffi = ::xla::ffi;

ffi::Error HostCollective(ffi::RemainingArgs args, ffi::RemainingRets rets, std::string_view config) {
  return RunCollective(args, rets, config, nullptr);
}

}  // namespace

XLA_FFI_DEFINE_HANDLER(kTfRingCollective, HostCollective,
                       ffi::Ffi::Bind().RemainingArgs().RemainingRets().Attr<std::string_view>(
                           "config"));

#ifdef TF_RING_XLA_EXPORTED_HANDLERS
// The engine-only library has no TensorFlow (and so no XLA) to register
// with: the handler is exported for the framework that loads it to register
// (tf_ring_engine/xla.py, through jax.ffi).
extern "C" XLA_FFI_Error* tf_ring_xla_host_collective(XLA_FFI_CallFrame* frame) {
  return kTfRingCollective(frame);
}
#else
// Static registration runs when the library loads, before the first compile.
XLA_FFI_REGISTER_HANDLER(::xla::ffi::GetXlaFfiApi(), "tf_ring_collective", "Host",
                         kTfRingCollective);
#endif

}  // namespace xla_ops
}  // namespace tf_ring
