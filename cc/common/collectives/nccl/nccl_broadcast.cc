// Broadcast over NCCL: the root's input lands in every rank's output. A
// fused batch is one NCCL group of broadcasts.
#include "common/collectives/nccl/nccl_collectives.h"
#include "common/transport/gpu/cuda_check.h"

namespace tf_ring {

Status NcclBroadcast(const NcclContext& ctx, const Response& resp, std::vector<TensorEntry>& entries) {
  Status s = NcclStatus(ncclGroupStart(), "ncclGroupStart", entries[0].name);
  if (!s.ok()) return s;
  for (TensorEntry& e : entries) {
    if (e.NumBytes() == 0) continue;
    const void* send = ctx.rank == resp.root_rank ? e.input : e.output;
    s = NcclStatus(ncclBroadcast(send, e.output, e.NumBytes(), ncclInt8, resp.root_rank, ctx.comm, ctx.stream),
                   "ncclBroadcast", e.name);
    if (!s.ok()) break;
  }
  Status end = NcclStatus(ncclGroupEnd(), "ncclGroupEnd (broadcast)", entries[0].name);
  return s.ok() ? end : s;
}

}  // namespace tf_ring
