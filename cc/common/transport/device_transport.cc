// Picks the device transport of this build. The one #ifdef between the
// engine and CUDA: a CPU build compiles none of cc/common/transport/gpu/.
#include "common/transport/device_transport.h"

#ifdef TF_RING_CUDA
#include "common/transport/gpu/nccl_transport.h"
#endif

namespace tf_ring {

#ifdef TF_RING_CUDA

std::unique_ptr<DeviceTransport> MakeDeviceTransport(const MpiContext* mpi) {
  return MakeNcclTransport(mpi);
}
bool DeviceSupportBuilt() { return true; }

#else

namespace {
Status NoCuda() {
  return Status::Precondition(
      "this tf_ring was built without CUDA (a CPU build), so it cannot use GPU tensors; rebuild "
      "with CUDA and NCCL present (TF_RING_WITH_NCCL=1 says what is missing), or pass CPU tensors.");
}
}  // namespace

std::unique_ptr<DeviceTransport> MakeDeviceTransport(const MpiContext*) { return nullptr; }
bool DeviceSupportBuilt() { return false; }
Status RecordReadyEvent(int, void*, std::shared_ptr<void>*) { return NoCuda(); }
Status AllocateDeviceMemory(int, int64_t, void**) { return NoCuda(); }
void FreeDeviceMemory(int, void*) {}

#endif

}  // namespace tf_ring
