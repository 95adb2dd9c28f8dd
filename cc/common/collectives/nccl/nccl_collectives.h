// Collectives over NCCL on GPU buffers, one per file like their MPI
// siblings. Each only queues work on the engine's stream and returns; the
// transport records an event after it and a watcher thread completes the
// entries. No hand-written kernels: NCCL averages (ncclAvg), scales
// (ncclRedOpCreatePreMulSum) and reduces fp16/bf16 natively, and fusion
// packs with cudaMemcpyAsync.
#ifndef TF_RING_COMMON_COLLECTIVES_NCCL_COLLECTIVES_H_
#define TF_RING_COMMON_COLLECTIVES_NCCL_COLLECTIVES_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <vector>

#include "common/transport/gpu/device_buffer.h"
#include "common/base/message.h"
#include "common/base/tensor_entry.h"

namespace tf_ring {

struct NcclContext {
  ncclComm_t comm;
  cudaStream_t stream;  // the engine's stream; every call below is queued on it
  int rank;
  int size;
  DeviceBuffer* fusion;  // device fusion buffer (allreduce batches)
};

Status NcclAllreduce(const NcclContext& ctx, const Response& resp, std::vector<TensorEntry>& entries);
Status NcclAllgather(const NcclContext& ctx, const Response& resp, std::vector<TensorEntry>& entries);
Status NcclBroadcast(const NcclContext& ctx, const Response& resp, std::vector<TensorEntry>& entries);
Status NcclReducescatter(const NcclContext& ctx, const Response& resp, std::vector<TensorEntry>& entries);
Status NcclAlltoall(const NcclContext& ctx, const Response& resp, std::vector<TensorEntry>& entries);

// The NCCL reduction for `resp`: Sum/Min/Max/Prod/Avg, or a PreMulSum that
// folds prescale, postscale and the Average divisor into one factor.
// Release() destroys a created PreMulSum (allowed once the calls using it
// have returned).
class NcclReduction {
 public:
  Status Create(const NcclContext& ctx, const Response& resp);
  ncclRedOp_t op() const { return op_; }
  void Release();
  ~NcclReduction() { Release(); }

 private:
  ncclRedOp_t op_ = ncclSum;
  ncclComm_t created_on_ = nullptr;
};

}  // namespace tf_ring

#endif  // TF_RING_COMMON_COLLECTIVES_NCCL_COLLECTIVES_H_
