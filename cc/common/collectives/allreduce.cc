// Allreduce of one tensor (in place in its output) or of a fused batch
// (packed into scratch, reduced once, unpacked).
#include <cstring>

#include "common/collectives/collectives.h"
#include "common/mpi_types.h"
#include "common/scale.h"

namespace tf_ring {

namespace {
void ApplyPostscale(void* buf, int64_t count, const Response& resp, int size) {
  double factor = resp.postscale;
  if (resp.reduce_op == ReduceOp::kAverage) {
    if (IsFloatingPoint(resp.dtype)) {
      factor /= size;
    } else {
      DivideIntegers(buf, count, resp.dtype, size);
    }
  }
  ScaleBuffer(buf, count, resp.dtype, factor);
}
}  // namespace

Status RunAllreduce(const CollectiveContext& ctx, const Response& resp,
                    std::vector<TensorEntry>& entries) {
  const size_t elem = DataTypeSize(resp.dtype);
  char* buf;
  int64_t count = 0;
  if (entries.size() == 1) {
    TensorEntry& e = entries[0];
    buf = static_cast<char*>(e.output);
    count = e.NumElements();
    if (e.input != e.output && count > 0) std::memcpy(buf, e.input, count * elem);
  } else {
    for (auto& e : entries) count += e.NumElements();
    buf = ctx.scratch->Get(count * elem);
    int64_t offset = 0;
    for (auto& e : entries) {
      std::memcpy(buf + offset, e.input, e.NumBytes());
      offset += e.NumBytes();
    }
  }

  ScaleBuffer(buf, count, resp.dtype, resp.prescale);
  int rc = MpiAllreduceLarge(buf, count, MpiDatatype(resp.dtype), elem,
                             MpiReduceOp(resp.reduce_op, resp.dtype), ctx.mpi->comm());
  if (rc != MPI_SUCCESS) return Status::Unknown("MPI_Allreduce failed with code " + std::to_string(rc));
  ApplyPostscale(buf, count, resp, ctx.mpi->size());

  if (entries.size() > 1) {
    int64_t offset = 0;
    for (auto& e : entries) {
      std::memcpy(e.output, buf + offset, e.NumBytes());
      offset += e.NumBytes();
    }
  }
  return Status::OK();
}

}  // namespace tf_ring
