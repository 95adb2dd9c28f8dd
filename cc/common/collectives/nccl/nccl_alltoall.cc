// Alltoall over NCCL point-to-point: rank i sends splits[i][j] rows to rank
// j with ncclSend/ncclRecv pairs in one group. The received row counts
// (output 1) are written from the host: adapters allocate that output in
// host memory.
#include "common/collectives/nccl/nccl_collectives.h"
#include "common/transport/gpu/cuda_check.h"

namespace tf_ring {

namespace {
Status AlltoallOne(const NcclContext& ctx, const int64_t* splits, TensorEntry& e) {
  const int size = ctx.size;
  int64_t row_bytes = static_cast<int64_t>(DataTypeSize(e.dtype));
  for (size_t d = 1; d < e.shape.size(); ++d) row_bytes *= e.shape[d];
  int64_t received = 0;
  for (int r = 0; r < size; ++r) received += splits[r * size + ctx.rank];
  std::vector<int64_t> out_shape = e.shape;
  out_shape[0] = received;
  void* out = nullptr;
  Status s = e.allocate_output(0, out_shape, &out);
  if (!s.ok()) return s;
  void* splits_out = nullptr;
  s = e.allocate_output(1, {size}, &splits_out);
  if (!s.ok()) return s;
  int32_t* received_splits = static_cast<int32_t*>(splits_out);
  for (int r = 0; r < size; ++r) received_splits[r] = static_cast<int32_t>(splits[r * size + ctx.rank]);

  const char* in = static_cast<const char*>(e.input);
  char* dst = static_cast<char*>(out);
  int64_t send_off = 0, recv_off = 0;
  for (int r = 0; r < size && row_bytes > 0; ++r) {
    const int64_t send_bytes = splits[ctx.rank * size + r] * row_bytes;
    const int64_t recv_bytes = splits[r * size + ctx.rank] * row_bytes;
    if (send_bytes > 0) {
      s = NcclStatus(ncclSend(in + send_off, send_bytes, ncclInt8, r, ctx.comm, ctx.stream), "ncclSend", e.name);
      if (!s.ok()) return s;
    }
    if (recv_bytes > 0) {
      s = NcclStatus(ncclRecv(dst + recv_off, recv_bytes, ncclInt8, r, ctx.comm, ctx.stream), "ncclRecv", e.name);
      if (!s.ok()) return s;
    }
    send_off += send_bytes;
    recv_off += recv_bytes;
  }
  return Status::OK();
}
}  // namespace

Status NcclAlltoall(const NcclContext& ctx, const Response& resp, std::vector<TensorEntry>& entries) {
  const size_t matrix = static_cast<size_t>(ctx.size) * ctx.size;
  if (resp.sizes.size() != matrix * entries.size()) {
    return Status::Unknown("internal error: alltoall of tensor '" + resp.names[0] + "' carries no splits matrix");
  }
  Status s = NcclStatus(ncclGroupStart(), "ncclGroupStart", entries[0].name);
  if (!s.ok()) return s;
  for (size_t t = 0; t < entries.size() && s.ok(); ++t) s = AlltoallOne(ctx, resp.sizes.data() + t * matrix, entries[t]);
  Status end = NcclStatus(ncclGroupEnd(), "ncclGroupEnd (alltoall)", entries[0].name);
  return s.ok() ? end : s;
}

}  // namespace tf_ring
