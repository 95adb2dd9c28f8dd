// Alltoall with per-rank splits: rank i sends splits[i][j] rows of its
// tensor to rank j. The coordinator put the agreed matrix in Response.sizes
// ([tensor][i][j] when a response carries several tensors) after checking
// that every count fits MPI's ints (AlltoallCountProblem). Output 0 is the
// received rows in rank order; output 1 (int32, one entry per rank) is how
// many rows came from each rank, which the gradient needs to send them back.
#include "common/collectives/collectives.h"

namespace tf_ring {

namespace {

int64_t RowBytes(const TensorEntry& e) {
  int64_t row_bytes = static_cast<int64_t>(DataTypeSize(e.dtype));
  for (size_t d = 1; d < e.shape.size(); ++d) row_bytes *= e.shape[d];
  return row_bytes;
}

// Byte counts and displacements for MPI_Alltoallv from a row count per peer
// (checked to fit beforehand).
void ToByteCounts(const std::vector<int64_t>& rows, int64_t row_bytes, std::vector<int>* counts,
                  std::vector<int>* displs) {
  int64_t offset = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    (*counts)[r] = static_cast<int>(rows[r] * row_bytes);
    (*displs)[r] = static_cast<int>(offset);
    offset += rows[r] * row_bytes;
  }
}

Status AlltoallOne(const CollectiveContext& ctx, const Response& resp, const int64_t* splits,
                   TensorEntry& e) {
  const int size = ctx.mpi->size();
  const int rank = ctx.mpi->rank();
  const int64_t row_bytes = RowBytes(e);
  std::vector<int64_t> send_rows(size), recv_rows(size);
  int64_t received = 0;
  for (int r = 0; r < size; ++r) {
    send_rows[r] = splits[rank * size + r];
    recv_rows[r] = splits[r * size + rank];
    received += recv_rows[r];
  }
  std::vector<int> send_counts(size), send_displs(size), recv_counts(size), recv_displs(size);
  ToByteCounts(send_rows, row_bytes, &send_counts, &send_displs);
  ToByteCounts(recv_rows, row_bytes, &recv_counts, &recv_displs);

  std::vector<int64_t> out_shape = e.shape;
  out_shape[0] = received;
  void* out = nullptr;
  void* splits_out = nullptr;
  Status local = e.allocate_output(0, out_shape, &out);
  if (local.ok()) local = e.allocate_output(1, {size}, &splits_out);
  Status agreed = AgreeToProceed(ctx, resp, local);
  if (!agreed.ok()) return agreed;
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
  const int size = ctx.mpi->size();
  const size_t matrix = static_cast<size_t>(size) * size;
  if (resp.sizes.size() != matrix * entries.size()) {
    return Status::Unknown("internal error: alltoall response for '" + resp.names[0] +
                           "' carries no splits matrix");
  }
  for (size_t t = 0; t < entries.size(); ++t) {
    // The whole agreed matrix, not just this rank's row and column: every
    // rank takes the same decision (the coordinator has already checked it).
    const int64_t* splits = resp.sizes.data() + t * matrix;
    const std::string problem =
        AlltoallCountProblem(std::vector<int64_t>(splits, splits + matrix), size, RowBytes(entries[t]));
    if (!problem.empty()) {
      return Status::InvalidArgument("alltoall of tensor '" + entries[t].name + "': " + problem +
                                     "; split the tensor.");
    }
    Status s = AlltoallOne(ctx, resp, splits, entries[t]);
    if (!s.ok()) return s;
  }
  return Status::OK();
}

}  // namespace tf_ring
