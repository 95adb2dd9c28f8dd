// Allgather over NCCL where ranks may send different numbers of rows:
// ncclAllGather when every rank sends the same amount, else one
// ncclBroadcast per rank (its rows, into their place in every output),
// grouped so NCCL runs them together. A fused batch is one group.
#include "common/collectives/nccl/nccl_collectives.h"
#include "common/transport/gpu/cuda_check.h"

namespace tf_ring {

namespace {
Status GatherOne(const NcclContext& ctx, const int64_t* rows, TensorEntry& e) {
  int64_t row_bytes = static_cast<int64_t>(DataTypeSize(e.dtype));
  for (size_t d = 1; d < e.shape.size(); ++d) row_bytes *= e.shape[d];
  int64_t total_rows = 0;
  bool even = true;
  for (int r = 0; r < ctx.size; ++r) {
    total_rows += rows[r];
    even = even && rows[r] == rows[0];
  }
  std::vector<int64_t> out_shape = e.shape;
  out_shape[0] = total_rows;
  void* out = nullptr;
  Status s = e.allocate_output(0, out_shape, &out);
  if (!s.ok() || total_rows == 0 || row_bytes == 0) return s;
  char* dst = static_cast<char*>(out);
  if (even) {
    return NcclStatus(ncclAllGather(e.input, dst, rows[0] * row_bytes, ncclInt8, ctx.comm, ctx.stream),
                      "ncclAllGather", e.name);
  }
  int64_t offset = 0;
  for (int r = 0; r < ctx.size; ++r) {
    const int64_t bytes = rows[r] * row_bytes;
    if (bytes > 0) {
      const void* send = r == ctx.rank ? e.input : dst + offset;
      s = NcclStatus(ncclBroadcast(send, dst + offset, bytes, ncclInt8, r, ctx.comm, ctx.stream),
                     "ncclBroadcast (allgather)", e.name);
      if (!s.ok()) return s;
    }
    offset += bytes;
  }
  return Status::OK();
}
}  // namespace

Status NcclAllgather(const NcclContext& ctx, const Response& resp, std::vector<TensorEntry>& entries) {
  if (resp.sizes.size() != entries.size() * static_cast<size_t>(ctx.size)) {
    return Status::Unknown("internal error: allgather of tensor '" + resp.names[0] +
                           "' carries no row counts");
  }
  Status s = NcclStatus(ncclGroupStart(), "ncclGroupStart", entries[0].name);
  if (!s.ok()) return s;
  for (size_t t = 0; t < entries.size() && s.ok(); ++t) {
    s = GatherOne(ctx, resp.sizes.data() + t * ctx.size, entries[t]);
  }
  // The group must be closed even after a failure, or NCCL stays in it.
  Status end = NcclStatus(ncclGroupEnd(), "ncclGroupEnd (allgather)", entries[0].name);
  return s.ok() ? end : s;
}

}  // namespace tf_ring
