// Local failures turned into agreed ones. A collective that allocates (its
// outputs, scratch) asks every rank whether that worked before any data
// moves: a rank that left alone would leave the others waiting in the
// transfer, and every later collective behind it.
#include "common/collectives/collectives.h"

namespace tf_ring {

std::string DescribeBatch(const Response& resp) {
  std::string text = std::string(OpTypeName(resp.op)) + " of tensor '" + resp.names[0] + "'";
  if (resp.names.size() > 1) text += " (fused with " + std::to_string(resp.names.size() - 1) + " more)";
  return text;
}

Status AgreeToProceed(const CollectiveContext& ctx, const Response& resp, const Status& local) {
  const int size = ctx.mpi->size();
  int failed = local.ok() ? 0 : 1;
  std::vector<int> all(size, 0);
  const int rc = MPI_Allgather(&failed, 1, MPI_INT, all.data(), 1, MPI_INT, ctx.mpi->comm());
  if (rc != MPI_SUCCESS) {
    return Status::Unknown(DescribeBatch(resp) + ": MPI_Allgather failed with code " + std::to_string(rc));
  }
  std::string ranks;
  int count = 0;
  for (int r = 0; r < size; ++r) {
    if (!all[r]) continue;
    ranks += (count++ ? ", " : "") + std::to_string(r);
  }
  if (count == 0) return Status::OK();
  std::string text = DescribeBatch(resp) + ": " + (count == 1 ? "rank " : "ranks ") + ranks +
                     " could not allocate memory for it";
  if (!local.ok()) text += " (here: " + local.message() + ")";
  return Status::ResourceExhausted(text + ", so no rank ran it. Free memory or split the tensor; "
                                          "the engine keeps working.");
}

}  // namespace tf_ring
