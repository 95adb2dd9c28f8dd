// Allreduce over NCCL: one tensor straight from input to output, or a fused
// batch packed into the device fusion buffer, reduced once, unpacked. Every
// element is reduced by the same NCCL call either way; fused equals unfused
// bit for bit whenever NCCL's result does not depend on an element's offset
// (always for two ranks; for more ranks a ring may sum a chunk in another order).
#include "common/collectives/nccl/nccl_collectives.h"
#include "common/transport/gpu/cuda_check.h"

namespace tf_ring {

Status NcclAllreduce(const NcclContext& ctx, const Response& resp, std::vector<TensorEntry>& entries) {
  NcclReduction reduction;
  Status s = reduction.Create(ctx, resp);
  if (!s.ok()) return s;
  const ncclDataType_t type = NcclType(resp.dtype);
  if (entries.size() == 1) {
    TensorEntry& e = entries[0];
    if (e.NumElements() == 0) return Status::OK();
    return NcclStatus(ncclAllReduce(e.input, e.output, e.NumElements(), type, reduction.op(), ctx.comm,
                                    ctx.stream),
                      "ncclAllReduce", e.name);
  }
  int64_t bytes = 0;
  for (const TensorEntry& e : entries) bytes += e.NumBytes();
  if (bytes == 0) return Status::OK();
  char* buf = nullptr;
  s = ctx.fusion->Get(static_cast<size_t>(bytes), entries[0].name, &buf);
  if (!s.ok()) return s;
  int64_t offset = 0;
  for (const TensorEntry& e : entries) {
    if (e.NumBytes() > 0) {
      s = CudaStatus(cudaMemcpyAsync(buf + offset, e.input, e.NumBytes(), cudaMemcpyDeviceToDevice, ctx.stream),
                     "copying into the fusion buffer", e.name);
      if (!s.ok()) return s;
    }
    offset += e.NumBytes();
  }
  s = NcclStatus(ncclAllReduce(buf, buf, bytes / DataTypeSize(resp.dtype), type, reduction.op(), ctx.comm,
                               ctx.stream),
                 "ncclAllReduce of a fused batch", entries[0].name);
  if (!s.ok()) return s;
  offset = 0;
  for (TensorEntry& e : entries) {
    if (e.NumBytes() > 0) {
      s = CudaStatus(cudaMemcpyAsync(e.output, buf + offset, e.NumBytes(), cudaMemcpyDeviceToDevice, ctx.stream),
                     "copying out of the fusion buffer", e.name);
      if (!s.ok()) return s;
    }
    offset += e.NumBytes();
  }
  return Status::OK();
}

}  // namespace tf_ring
