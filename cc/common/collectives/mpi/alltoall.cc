// Alltoall with per-rank splits: rank i sends splits[i][j] rows of its
// tensor to rank j. The coordinator put the agreed matrix in Response.sizes
// ([tensor][i][j] when a response carries several tensors). Output 0 is the
// received rows in rank order; output 1 (int32, one entry per rank) is how
// many rows came from each rank, which the gradient needs to send them back.
#include <climits>

#include "common/collectives/collectives.h"

namespace tf_ring {

namespace {

Status TooLarge(const std::string& name) {
  return Status::InvalidArgument("alltoall of tensor '" + name +
                                 "' moves more than 2 GiB to or from one rank; split the tensor.");
}

// Byte counts and displacements for MPI_Alltoallv from a row count per peer.
bool ToByteCounts(const std::vector<int64_t>& rows, int64_t row_bytes, std::vector<int>* counts,
                  std::vector<int>* displs) {
  int64_t offset = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    const int64_t bytes = rows[r] * row_bytes;
    if (bytes > INT_MAX || offset > INT_MAX) return false;
    (*counts)[r] = static_cast<int>(bytes);
    (*displs)[r] = static_cast<int>(offset);
    offset += bytes;
  }
  return true;
}

Status AlltoallOne(const CollectiveContext& ctx, const int64_t* splits, TensorEntry& e) {
  const int size = ctx.mpi->size();
  const int rank = ctx.mpi->rank();
  int64_t row_bytes = static_cast<int64_t>(DataTypeSize(e.dtype));
  for (size_t d = 1; d < e.shape.size(); ++d) row_bytes *= e.shape[d];

  std::vector<int64_t> send_rows(size), recv_rows(size);
  int64_t received = 0;
  for (int r = 0; r < size; ++r) {
    send_rows[r] = splits[rank * size + r];
    recv_rows[r] = splits[r * size + rank];
    received += recv_rows[r];
  }
  std::vector<int> send_counts(size), send_displs(size), recv_counts(size), recv_displs(size);
  if (!ToByteCounts(send_rows, row_bytes, &send_counts, &send_displs) ||
      !ToByteCounts(recv_rows, row_bytes, &recv_counts, &recv_displs)) {
    return TooLarge(e.name);
  }

  std::vector<int64_t> out_shape = e.shape;
  out_shape[0] = received;
  void* out = nullptr;
  Status s = e.allocate_output(0, out_shape, &out);
  if (!s.ok()) return s;
  void* splits_out = nullptr;
  s = e.allocate_output(1, {size}, &splits_out);
  if (!s.ok()) return s;
  int32_t* received_splits = static_cast<int32_t*>(splits_out);
  for (int r = 0; r < size; ++r) received_splits[r] = static_cast<int32_t>(recv_rows[r]);

  int rc = MPI_Alltoallv(e.input, send_counts.data(), send_displs.data(), MPI_BYTE, out,
                         recv_counts.data(), recv_displs.data(), MPI_BYTE, ctx.mpi->comm());
  if (rc != MPI_SUCCESS) return Status::Unknown("MPI_Alltoallv failed with code " + std::to_string(rc));
  return Status::OK();
}

}  // namespace

Status RunAlltoall(const CollectiveContext& ctx, const Response& resp,
                   std::vector<TensorEntry>& entries) {
  const size_t matrix = static_cast<size_t>(ctx.mpi->size()) * ctx.mpi->size();
  if (resp.sizes.size() != matrix * entries.size()) {
    return Status::Unknown("internal error: alltoall response for '" + resp.names[0] +
                           "' carries no splits matrix");
  }
  for (size_t t = 0; t < entries.size(); ++t) {
    Status s = AlltoallOne(ctx, resp.sizes.data() + t * matrix, entries[t]);
    if (!s.ok()) return s;
  }
  return Status::OK();
}

}  // namespace tf_ring
