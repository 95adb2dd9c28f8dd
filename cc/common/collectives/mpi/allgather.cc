// Allgather with a first dimension that may differ per rank. Each rank sends
// its tensors back to back; rank r's block lands at displacement r (or, with
// the hierarchical transfer, at its place host by host) and is unpacked into
// every output in rank order.
#include <cstring>

#include "common/collectives/collectives.h"

namespace tf_ring {

Status RunAllgather(const CollectiveContext& ctx, const Response& resp,
                    std::vector<TensorEntry>& entries) {
  const int size = ctx.mpi->size();
  const size_t num = entries.size();
  const size_t elem = DataTypeSize(resp.dtype);

  // rows[t][r] = first dimension of tensor t on rank r.
  std::vector<int64_t> row_bytes(num);
  std::vector<int64_t> total_rows(num, 0);
  for (size_t t = 0; t < num; ++t) {
    int64_t row = 1;
    for (size_t d = 1; d < entries[t].shape.size(); ++d) row *= entries[t].shape[d];
    row_bytes[t] = row * elem;
    for (int r = 0; r < size; ++r) total_rows[t] += resp.sizes[t * size + r];
  }
  std::vector<int64_t> bytes_of(size, 0);  // rank r's block, all tensors together
  for (int r = 0; r < size; ++r) {
    for (size_t t = 0; t < num; ++t) bytes_of[r] += resp.sizes[t * size + r] * row_bytes[t];
  }
  // From the agreed row counts: every rank takes the same decision.
  const std::string problem = AllgatherCountProblem(bytes_of);
  if (!problem.empty()) {
    return Status::InvalidArgument(DescribeBatch(resp) + ": " + problem + "; split the tensor" +
                                   (num > 1 ? " or lower TF_RING_FUSION_THRESHOLD." : "."));
  }
  std::vector<int> counts(size), displs(size);
  int64_t total_bytes = 0;
  for (int r = 0; r < size; ++r) {
    counts[r] = static_cast<int>(bytes_of[r]);
    displs[r] = static_cast<int>(total_bytes);
    total_bytes += bytes_of[r];
  }
  // Host by host, a host's blocks together may pass MPI's int counts where
  // no single block does: that batch runs flat (the same decision everywhere).
  bool hierarchical = RunsHierarchical(ctx, OpType::kAllgather);
  HostBlocks plan;
  if (hierarchical) {
    plan = PlanHostBlocks(ctx.hosts->host_of, ctx.hosts->local_rank_of, ctx.hosts->hosts, bytes_of);
    hierarchical = plan.fits_mpi;
  }
  std::vector<int64_t> offsets(displs.begin(), displs.end());  // where rank r's block arrives
  if (hierarchical) offsets = plan.offsets;
  const int rank = ctx.mpi->rank();
  // One tensor arriving in rank order lands straight in the output.
  const bool direct = num == 1 && offsets == std::vector<int64_t>(displs.begin(), displs.end());

  Status local;
  std::vector<char*> outputs(num, nullptr);
  for (size_t t = 0; t < num && local.ok(); ++t) {
    std::vector<int64_t> shape = entries[t].shape;
    shape[0] = total_rows[t];
    void* data = nullptr;
    local = entries[t].allocate_output(0, shape, &data);
    outputs[t] = static_cast<char*>(data);
  }
  char* send = nullptr;
  if (local.ok() && !direct) {
    send = ctx.scratch->Get(total_bytes + counts[rank]);
    if (send == nullptr) local = Status::Unknown("no scratch memory for the fused transfer");
  }
  Status agreed = AgreeToProceed(ctx, resp, local);
  if (!agreed.ok()) return agreed;

  auto transfer = [&](const void* send, char* recv) {
    if (hierarchical) return HierarchicalAllgatherv(*ctx.hosts, send, bytes_of, plan, recv);
    return MPI_Allgatherv(send, counts[rank], MPI_BYTE, recv, counts.data(), displs.data(), MPI_BYTE,
                          ctx.mpi->comm());
  };
  int rc;
  if (direct) {
    MarkPhase(ctx, "ALLGATHER");
    rc = transfer(entries[0].input, outputs[0]);
  } else {
    MarkPhase(ctx, kMemcpyIn);
    char* recv = send + counts[rank];
    int64_t offset = 0;
    for (size_t t = 0; t < num; ++t) {
      std::memcpy(send + offset, entries[t].input, entries[t].NumBytes());
      offset += entries[t].NumBytes();
    }
    MarkPhase(ctx, "ALLGATHER");
    rc = transfer(send, recv);
    MarkPhase(ctx, kMemcpyOut);
    for (int r = 0; r < size; ++r) {
      int64_t src = offsets[r];
      for (size_t t = 0; t < num; ++t) {
        int64_t rows_before = 0;
        for (int q = 0; q < r; ++q) rows_before += resp.sizes[t * size + q];
        int64_t bytes = resp.sizes[t * size + r] * row_bytes[t];
        std::memcpy(outputs[t] + rows_before * row_bytes[t], recv + src, bytes);
        src += bytes;
      }
    }
  }
  if (rc != MPI_SUCCESS) return Status::Unknown("MPI_Allgatherv failed with code " + std::to_string(rc));
  return Status::OK();
}

}  // namespace tf_ring
