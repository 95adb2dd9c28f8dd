// The seam between the engine and a device transport (NCCL for CUDA tensors).
// The engine's core sees only this interface and never a CUDA type; a CPU
// build has no transport and fails GPU tensors with a clear error.
#ifndef TF_RING_COMMON_DEVICE_TRANSPORT_H_
#define TF_RING_COMMON_DEVICE_TRANSPORT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/collectives/collectives.h"
#include "common/base/message.h"
#include "common/transport/mpi_context.h"
#include "common/base/tensor_entry.h"

namespace tf_ring {

class DeviceTransport {
 public:
  virtual ~DeviceTransport() = default;
  // Queues `resp` on the device and returns without waiting for it. Every
  // entry's done() is called later, from the transport's own thread, when
  // the device work finished or failed. Called from the engine thread only,
  // in the same response order on every rank.
  virtual void Start(const Response& resp, std::vector<TensorEntry> entries, PhaseMarks* marks) = 0;
  // The engine stops. With `abort` (a stall or an error: peers may be gone)
  // the communicator is aborted at once; otherwise work in flight gets a
  // short grace period to finish first. Remaining entries fail with `reason`.
  virtual void Stop(bool abort, const std::string& reason) = 0;
};

// The transport of this build: NCCL in a CUDA build, null in a CPU build.
std::unique_ptr<DeviceTransport> MakeDeviceTransport(const MpiContext* mpi);

// True when this build can move GPU tensors.
bool DeviceSupportBuilt();

// Helpers for adapters without CUDA of their own (the engine-only binding).
// In a CPU build each fails with a message saying the build has no CUDA.
// Records an event on `stream` (a cudaStream_t; null = the legacy default
// stream) of `device` and returns it owned: the deleter destroys it.
Status RecordReadyEvent(int device, void* stream, std::shared_ptr<void>* event);
Status AllocateDeviceMemory(int device, int64_t bytes, void** data);
void FreeDeviceMemory(int device, void* data);

}  // namespace tf_ring

#endif  // TF_RING_COMMON_DEVICE_TRANSPORT_H_
