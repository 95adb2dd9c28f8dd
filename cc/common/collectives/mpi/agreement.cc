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

namespace {
Status WithCode(StatusCode code, std::string text) {
  switch (code) {
    case StatusCode::kInvalidArgument: return Status::InvalidArgument(std::move(text));
    case StatusCode::kPrecondition: return Status::Precondition(std::move(text));
    case StatusCode::kAborted: return Status::Aborted(std::move(text));
    case StatusCode::kResourceExhausted: return Status::ResourceExhausted(std::move(text));
    default: return Status::Unknown(std::move(text));
  }
}
}  // namespace

Status AgreeToProceed(const CollectiveContext& ctx, const Response& resp, const Status& local) {
  const int size = ctx.mpi->size();
  // Each rank's status code (0: fine), so every rank reports the same class:
  // a failed allocation is not the only local failure (an XLA output whose
  // compiled shape no longer fits is an invalid argument, not low memory).
  int mine = static_cast<int>(local.code());
  std::vector<int> all(size, 0);
  const int rc = MPI_Allgather(&mine, 1, MPI_INT, all.data(), 1, MPI_INT, ctx.mpi->comm());
  if (rc != MPI_SUCCESS) {
    return Status::Unknown(DescribeBatch(resp) + ": MPI_Allgather failed with code " + std::to_string(rc));
  }
  std::string ranks;
  int count = 0;
  // Allocators report no memory as kUnknown or kResourceExhausted; any other
  // class (the lowest such rank's) is a specific refusal and keeps its class.
  auto is_memory = [](StatusCode c) {
    return c == StatusCode::kUnknown || c == StatusCode::kResourceExhausted;
  };
  StatusCode specific = StatusCode::kOk;
  for (int r = 0; r < size; ++r) {
    if (all[r] == 0) continue;
    ranks += (count++ ? ", " : "") + std::to_string(r);
    const auto code = static_cast<StatusCode>(all[r]);
    if (specific == StatusCode::kOk && !is_memory(code)) specific = code;
  }
  if (count == 0) return Status::OK();
  const std::string who = (count == 1 ? "rank " : "ranks ") + ranks;
  const std::string here = local.ok() ? std::string() : " (here: " + local.message() + ")";
  if (specific == StatusCode::kOk) {
    return Status::ResourceExhausted(DescribeBatch(resp) + ": " + who +
                                     " could not allocate memory for it" + here +
                                     ", so no rank ran it. Free memory or split the tensor; "
                                     "the engine keeps working.");
  }
  return WithCode(specific, DescribeBatch(resp) + ": " + who + " could not take its output" + here +
                             ", so no rank ran it; the engine keeps working.");
}

}  // namespace tf_ring
