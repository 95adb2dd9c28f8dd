#include "common/transport/gpu/device_buffer.h"

#include <cuda_runtime_api.h>

#include <string>

#include "common/transport/gpu/cuda_check.h"

namespace tf_ring {

Status DeviceBuffer::Get(size_t bytes, const std::string& name, char** data) {
  if (bytes > bytes_) {
    Release();
    void* p = nullptr;
    Status s = CudaStatus(cudaMalloc(&p, bytes), "cudaMalloc of the fusion buffer", name);
    if (!s.ok()) return s;
    data_ = static_cast<char*>(p);
    bytes_ = bytes;
  }
  *data = data_;
  return Status::OK();
}

void DeviceBuffer::Release() {
  if (data_) cudaFree(data_);
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace tf_ring
