// CUDA helpers for adapters that have no CUDA of their own (the engine-only
// binding, which gets raw device pointers and a stream from Python).
#include <cuda_runtime_api.h>

#include <string>

#include "common/transport/device_transport.h"
#include "common/transport/gpu/cuda_check.h"

namespace tf_ring {

namespace {
// Runs on the caller's thread: leave its current device as it was.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    cudaGetDevice(&previous_);
    status_ = CudaStatus(cudaSetDevice(device), "cudaSetDevice", "(device " + std::to_string(device) + ")");
  }
  ~DeviceScope() { cudaSetDevice(previous_); }
  const Status& status() const { return status_; }

 private:
  int previous_ = 0;
  Status status_;
};
}  // namespace

Status RecordReadyEvent(int device, void* stream, std::shared_ptr<void>* event) {
  DeviceScope scope(device);
  if (!scope.status().ok()) return scope.status();
  cudaEvent_t ev = nullptr;
  Status s = CudaStatus(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate", "(ready event)");
  if (!s.ok()) return s;
  s = CudaStatus(cudaEventRecord(ev, static_cast<cudaStream_t>(stream)), "cudaEventRecord", "(ready event)");
  if (!s.ok()) {
    cudaEventDestroy(ev);
    return s;
  }
  *event = std::shared_ptr<void>(ev, [](void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); });
  return Status::OK();
}

Status AllocateDeviceMemory(int device, int64_t bytes, void** data) {
  DeviceScope scope(device);
  if (!scope.status().ok()) return scope.status();
  return CudaStatus(cudaMalloc(data, bytes > 0 ? bytes : 1), "cudaMalloc of an output", "(output)");
}

void FreeDeviceMemory(int device, void* data) {
  if (data == nullptr) return;
  DeviceScope scope(device);
  cudaFree(data);
}

}  // namespace tf_ring
