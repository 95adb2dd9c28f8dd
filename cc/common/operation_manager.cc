#include "common/operation_manager.h"

namespace tf_ring {

void OperationManager::Execute(const Response& resp, TensorQueue* queue, EngineStats* stats) {
  std::vector<TensorEntry> entries;
  entries.reserve(resp.names.size());
  size_t own = 0;  // entries this rank submitted (the rest stand in for a join)
  for (size_t t = 0; t < resp.names.size(); ++t) {
    TensorEntry e;
    if (queue->TakeEntry(resp.names[t], &e)) {
      entries.push_back(std::move(e));
      ++own;
    } else if (resp.has_joined_ranks() && !resp.is_error()) {
      entries.push_back(stand_ins_.Make(resp, t));
    }
  }

  Status status;
  if (resp.is_error()) {
    status = Status::InvalidArgument(resp.error);
  } else if (entries.size() != resp.names.size()) {
    // Cannot happen unless ranks disagree on state; failing beats corrupting.
    status = Status::Unknown("internal error: response for '" + resp.names[0] +
                             "' names a tensor this rank does not hold");
  } else {
    status = Run(resp, entries);
  }

  int64_t bytes = 0;
  for (auto& e : entries) bytes += e.NumBytes();
  stats->bytes += bytes;
  stats->tensors += static_cast<int64_t>(own);
  if (entries.size() > 1) stats->fused_batches++;
  for (auto& e : entries) e.done(status);
  stand_ins_.Clear();
}

Status OperationManager::Run(const Response& resp, std::vector<TensorEntry>& entries) {
  CollectiveContext ctx{mpi_, &scratch_, shm_};
  switch (resp.op) {
    case OpType::kAllreduce: return RunAllreduce(ctx, resp, entries);
    case OpType::kAllgather: return RunAllgather(ctx, resp, entries);
    case OpType::kBroadcast: return RunBroadcast(ctx, resp, entries);
    case OpType::kAlltoall: return RunAlltoall(ctx, resp, entries);
    case OpType::kReducescatter: return RunReducescatter(ctx, resp, entries);
    case OpType::kJoin:
      // Every rank's join() returns the last rank to join.
      for (auto& e : entries) *static_cast<int32_t*>(e.output) = resp.root_rank;
      return Status::OK();
    default:
      return Status::InvalidArgument(std::string(OpTypeName(resp.op)) +
                                     " is not supported by this build");
  }
}

}  // namespace tf_ring
