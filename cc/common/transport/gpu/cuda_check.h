// CUDA and NCCL results as engine Statuses that name the call and the tensor,
// and the mapping from engine dtypes and reduce ops to NCCL's.
#ifndef TF_RING_COMMON_GPU_CUDA_CHECK_H_
#define TF_RING_COMMON_GPU_CUDA_CHECK_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include "common/base/dtype.h"
#include "common/base/message.h"
#include "common/base/status.h"

namespace tf_ring {

// OK, or "<what> for tensor '<name>' failed: <CUDA error text>".
Status CudaStatus(cudaError_t err, const char* what, const std::string& name);
// The same for NCCL; adds ncclGetLastError's detail when NCCL has one.
Status NcclStatus(ncclResult_t res, const char* what, const std::string& name);

// NCCL's type for `dtype` (bool travels as uint8: only non-reducing ops
// accept it, as on CPU).
ncclDataType_t NcclType(DataType dtype);

}  // namespace tf_ring

#endif  // TF_RING_COMMON_GPU_CUDA_CHECK_H_
