// Broadcast from the root into every rank's output; a fused batch is packed
// on the root and unpacked everywhere. Across hosts the transfer may be
// hierarchical (hierarchical_broadcast.cc).
#include <cstring>

#include "common/collectives/collectives.h"

namespace tf_ring {

namespace {
int Bcast(const CollectiveContext& ctx, void* buf, int64_t bytes, int root) {
  if (RunsHierarchical(ctx, OpType::kBroadcast)) return HierarchicalBcast(*ctx.hosts, buf, bytes, root);
  return MpiBcastLarge(buf, bytes, root, ctx.mpi->comm());
}
}  // namespace

Status RunBroadcast(const CollectiveContext& ctx, const Response& resp,
                    std::vector<TensorEntry>& entries) {
  const bool is_root = ctx.mpi->rank() == resp.root_rank;
  int rc;
  if (entries.size() == 1) {
    MarkPhase(ctx, "BROADCAST");
    TensorEntry& e = entries[0];
    if (is_root && e.input != e.output && e.NumBytes() > 0) std::memcpy(e.output, e.input, e.NumBytes());
    rc = Bcast(ctx, e.output, e.NumBytes(), resp.root_rank);
  } else {
    int64_t total = 0;
    for (auto& e : entries) total += e.NumBytes();
    char* buf = ctx.scratch->Get(total);
    Status agreed = AgreeToProceed(
        ctx, resp, buf ? Status::OK() : Status::Unknown("no scratch memory for the fused batch"));
    if (!agreed.ok()) return agreed;
    MarkPhase(ctx, kMemcpyIn);
    if (is_root) {
      int64_t offset = 0;
      for (auto& e : entries) {
        std::memcpy(buf + offset, e.input, e.NumBytes());
        offset += e.NumBytes();
      }
    }
    MarkPhase(ctx, "BROADCAST");
    rc = Bcast(ctx, buf, total, resp.root_rank);
    MarkPhase(ctx, kMemcpyOut);
    int64_t offset = 0;
    for (auto& e : entries) {
      std::memcpy(e.output, buf + offset, e.NumBytes());
      offset += e.NumBytes();
    }
  }
  if (rc != MPI_SUCCESS) return Status::Unknown("MPI_Bcast failed with code " + std::to_string(rc));
  return Status::OK();
}

}  // namespace tf_ring
