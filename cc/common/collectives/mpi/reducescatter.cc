// Reducescatter: reduce the same-shaped tensor over ranks and leave rank r
// with its block of rows. Rows are split as evenly as possible; the first
// (rows % size) ranks get one extra row.
#include <climits>
#include <cstring>

#include "common/collectives/collectives.h"
#include "common/transport/mpi_types.h"
#include "common/reduction/scale.h"

namespace tf_ring {

namespace {

int64_t RowsOfRank(int64_t rows, int size, int rank) {
  return rows / size + (rank < rows % size ? 1 : 0);
}

Status ReducescatterOne(const CollectiveContext& ctx, const Response& resp, TensorEntry& e) {
  const int size = ctx.mpi->size();
  const int rank = ctx.mpi->rank();
  const size_t elem = DataTypeSize(e.dtype);
  int64_t row_elems = 1;
  for (size_t d = 1; d < e.shape.size(); ++d) row_elems *= e.shape[d];

  std::vector<int> counts(size);
  for (int r = 0; r < size; ++r) {
    const int64_t n = RowsOfRank(e.shape[0], size, r) * row_elems;
    if (n > INT_MAX) {
      return Status::InvalidArgument("reducescatter of tensor '" + e.name +
                                     "' leaves more than 2^31 elements on one rank; split the tensor.");
    }
    counts[r] = static_cast<int>(n);
  }

  std::vector<int64_t> out_shape = e.shape;
  out_shape[0] = RowsOfRank(e.shape[0], size, rank);
  void* out = nullptr;
  Status local = e.allocate_output(0, out_shape, &out);
  // The input is read-only: a prescale works on a copy in scratch. Without
  // one, MPI reads the input itself and no copy (or scratch) is needed.
  const int64_t total = e.NumElements();
  const bool prescaled = resp.prescale != 1.0;
  char* send = nullptr;
  if (local.ok() && prescaled) {
    send = ctx.scratch->Get(total * elem);
    if (send == nullptr) local = Status::Unknown("no scratch memory for the prescaled copy");
  }
  Status agreed = AgreeToProceed(ctx, resp, local);
  if (!agreed.ok()) return agreed;
  if (prescaled) {
    if (total > 0) std::memcpy(send, e.input, total * elem);
    ScaleBuffer(send, total, e.dtype, resp.prescale);
  }
  const void* input = prescaled ? send : e.input;

  int rc = MPI_Reduce_scatter(input, out, counts.data(), MpiDatatype(e.dtype),
                              MpiReduceOp(resp.reduce_op, e.dtype), ctx.mpi->comm());
  if (rc != MPI_SUCCESS) {
    return Status::Unknown("MPI_Reduce_scatter failed with code " + std::to_string(rc));
  }

  double factor = resp.postscale;
  if (resp.reduce_op == ReduceOp::kAverage) {
    if (IsFloatingPoint(e.dtype)) {
      factor /= size;
    } else {
      DivideIntegers(out, counts[rank], e.dtype, size);
    }
  }
  ScaleBuffer(out, counts[rank], e.dtype, factor);
  return Status::OK();
}

}  // namespace

Status RunReducescatter(const CollectiveContext& ctx, const Response& resp,
                        std::vector<TensorEntry>& entries) {
  for (auto& e : entries) {
    Status s = ReducescatterOne(ctx, resp, e);
    if (!s.ok()) return s;
  }
  return Status::OK();
}

}  // namespace tf_ring
