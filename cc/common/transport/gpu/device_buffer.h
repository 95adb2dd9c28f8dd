// A device allocation that only grows: the fusion buffer, reused by every
// fused batch on the engine's one stream (stream order keeps batches apart).
#ifndef TF_RING_COMMON_GPU_DEVICE_BUFFER_H_
#define TF_RING_COMMON_GPU_DEVICE_BUFFER_H_

#include <cstddef>
#include <string>

#include "common/base/status.h"

namespace tf_ring {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Release(); }

  // At least `bytes` of device memory on the current device. Growing frees
  // the old block first (cudaFree waits for the device, so no batch still
  // uses it); batches are rarely larger than the fusion threshold.
  Status Get(size_t bytes, const std::string& name, char** data);
  void Release();

 private:
  char* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace tf_ring

#endif  // TF_RING_COMMON_GPU_DEVICE_BUFFER_H_
