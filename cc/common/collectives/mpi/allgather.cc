// Allgather with a first dimension that may differ per rank. Each rank sends
// its tensors back to back; rank r's block lands at displacement r (or, with
// the hierarchical transfer, at its place host by host) and is unpacked into
// every output in rank order.
#include <algorithm>
#include <climits>
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
  std::vector<int> counts(size), displs(size);
  int64_t total_bytes = 0;
  for (int r = 0; r < size; ++r) {
    int64_t bytes = 0;
    for (size_t t = 0; t < num; ++t) bytes += resp.sizes[t * size + r] * row_bytes[t];
    if (bytes > INT_MAX || total_bytes > INT_MAX) {
      return Status::InvalidArgument("allgather of tensor '" + entries[0].name +
                                     "' moves more than 2 GiB per rank; split the tensor.");
    }
    counts[r] = static_cast<int>(bytes);
    displs[r] = static_cast<int>(total_bytes);
    total_bytes += bytes;
  }

  std::vector<char*> outputs(num);
  for (size_t t = 0; t < num; ++t) {
    std::vector<int64_t> shape = entries[t].shape;
    shape[0] = total_rows[t];
    void* data = nullptr;
    Status s = entries[t].allocate_output(0, shape, &data);
    if (!s.ok()) return s;
    outputs[t] = static_cast<char*>(data);
  }

  const int rank = ctx.mpi->rank();
  const bool hierarchical = RunsHierarchical(ctx, OpType::kAllgather);
  std::vector<int64_t> offsets(displs.begin(), displs.end());  // where rank r's block arrives
  if (hierarchical) offsets = HostOrderOffsets(*ctx.hosts, counts);
  auto transfer = [&](const void* send, char* recv) {
    if (hierarchical) return HierarchicalAllgatherv(*ctx.hosts, send, counts, offsets, recv);
    return MPI_Allgatherv(send, counts[rank], MPI_BYTE, recv, counts.data(), displs.data(), MPI_BYTE,
                          ctx.mpi->comm());
  };
  int rc;
  // One tensor arriving in rank order lands straight in the output.
  const bool in_rank_order =
      std::equal(offsets.begin(), offsets.end(), displs.begin(),
                 [](int64_t a, int b) { return a == static_cast<int64_t>(b); });
  if (num == 1 && in_rank_order) {
    MarkPhase(ctx, "ALLGATHER");
    rc = transfer(entries[0].input, outputs[0]);
  } else {
    MarkPhase(ctx, kMemcpyIn);
    char* send = ctx.scratch->Get(total_bytes + counts[rank]);
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
