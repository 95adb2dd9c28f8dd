// Reducescatter over NCCL with the CPU path's row split (the first
// rows % size ranks get one extra row): ncclReduceScatter when the split is
// even, else one ncclReduce per rank onto that rank, grouped.
#include "common/collectives/nccl/nccl_collectives.h"
#include "common/transport/gpu/cuda_check.h"

namespace tf_ring {

namespace {
int64_t RowsOfRank(int64_t rows, int size, int rank) {
  return rows / size + (rank < rows % size ? 1 : 0);
}

Status ScatterOne(const NcclContext& ctx, ncclRedOp_t op, TensorEntry& e) {
  int64_t row_elems = 1;
  for (size_t d = 1; d < e.shape.size(); ++d) row_elems *= e.shape[d];
  std::vector<int64_t> out_shape = e.shape;
  out_shape[0] = RowsOfRank(e.shape[0], ctx.size, ctx.rank);
  void* out = nullptr;
  Status s = e.allocate_output(0, out_shape, &out);
  if (!s.ok() || row_elems == 0) return s;
  const ncclDataType_t type = NcclType(e.dtype);
  const size_t elem = DataTypeSize(e.dtype);
  if (e.shape[0] % ctx.size == 0) {
    if (e.shape[0] == 0) return Status::OK();
    return NcclStatus(ncclReduceScatter(e.input, out, out_shape[0] * row_elems, type, op, ctx.comm, ctx.stream),
                      "ncclReduceScatter", e.name);
  }
  int64_t offset = 0;  // elements
  for (int r = 0; r < ctx.size; ++r) {
    const int64_t count = RowsOfRank(e.shape[0], ctx.size, r) * row_elems;
    if (count > 0) {
      const char* send = static_cast<const char*>(e.input) + offset * elem;
      s = NcclStatus(ncclReduce(send, out, count, type, op, r, ctx.comm, ctx.stream),
                     "ncclReduce (reducescatter)", e.name);
      if (!s.ok()) return s;
    }
    offset += count;
  }
  return Status::OK();
}
}  // namespace

Status NcclReducescatter(const NcclContext& ctx, const Response& resp, std::vector<TensorEntry>& entries) {
  NcclReduction reduction;
  Status s = reduction.Create(ctx, resp);
  if (!s.ok()) return s;
  s = NcclStatus(ncclGroupStart(), "ncclGroupStart", entries[0].name);
  if (!s.ok()) return s;
  for (size_t t = 0; t < entries.size() && s.ok(); ++t) s = ScatterOne(ctx, reduction.op(), entries[t]);
  Status end = NcclStatus(ncclGroupEnd(), "ncclGroupEnd (reducescatter)", entries[0].name);
  return s.ok() ? end : s;
}

}  // namespace tf_ring
