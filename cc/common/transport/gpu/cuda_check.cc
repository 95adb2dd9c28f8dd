#include "common/transport/gpu/cuda_check.h"

namespace tf_ring {

Status CudaStatus(cudaError_t err, const char* what, const std::string& name) {
  if (err == cudaSuccess) return Status::OK();
  return Status::Unknown(std::string(what) + " for tensor '" + name + "' failed: " +
                         cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

Status NcclStatus(ncclResult_t res, const char* what, const std::string& name) {
  if (res == ncclSuccess) return Status::OK();
  std::string text = std::string(what) + " for tensor '" + name + "' failed: NCCL error: " +
                     ncclGetErrorString(res);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
  const char* detail = ncclGetLastError(nullptr);
  if (detail && *detail) text += std::string(" (") + detail + ")";
#endif
  return Status::Unknown(text);
}

ncclDataType_t NcclType(DataType dtype) {
  switch (dtype) {
    case DataType::kUint8: return ncclUint8;
    case DataType::kInt8: return ncclInt8;
    case DataType::kInt32: return ncclInt32;
    case DataType::kInt64: return ncclInt64;
    case DataType::kFloat16: return ncclFloat16;
    case DataType::kBFloat16: return ncclBfloat16;
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat64: return ncclFloat64;
    case DataType::kBool: return ncclUint8;
    case DataType::kUint16:
    case DataType::kInt16:
      break;  // no NCCL type: moved as bytes, never reduced (the coordinator refuses)
  }
  return ncclUint8;
}

}  // namespace tf_ring
