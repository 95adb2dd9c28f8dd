#include "common/operation_manager.h"

#include <algorithm>
#include <cstring>

#include "common/observability/stage_probe.h"
#include "common/transport/peer_failure.h"

namespace tf_ring {

namespace {
// "allreduce" -> "ALLREDUCE": the collective's row label in the timeline.
const char* PhaseName(OpType op) {
  switch (op) {
    case OpType::kAllreduce: return "ALLREDUCE";
    case OpType::kAllgather: return "ALLGATHER";
    case OpType::kBroadcast: return "BROADCAST";
    case OpType::kAlltoall: return "ALLTOALL";
    case OpType::kReducescatter: return "REDUCESCATTER";
    case OpType::kJoin: return "JOIN";
    case OpType::kBarrier: return "BARRIER";
  }
  return "COLLECTIVE";
}
}  // namespace

void OperationManager::Execute(const Response& resp, TensorQueue* queue, EngineStats* stats,
                               int64_t fusion_threshold) {
  const auto start = Timeline::Clock::now();
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

  const bool recording = timeline_ != nullptr && timeline_->active();
  marks_.Clear();
  ran_single_copy_ = false;
  Status status;
  if (resp.is_error()) {
    status = resp.is_mismatch() ? Status::Precondition(resp.error)
                                : Status::InvalidArgument(resp.error);
  } else if (entries.size() != resp.names.size()) {
    // Cannot happen unless ranks disagree on state; failing beats corrupting.
    status = Status::Unknown("internal error: response for '" + resp.names[0] +
                             "' names a tensor this rank does not hold");
  } else if (resp.gpu && device_ == nullptr) {
    status = Status::Precondition(std::string(OpTypeName(resp.op)) + " of tensor '" + resp.names[0] +
                                  "': GPU tensors need a CUDA build of tf_ring; this is a CPU build.");
  } else if (!resp.gpu) {
    const int64_t small_chunk_runs = shm_ ? shm_->shared_cache_runs() : 0;
    const int64_t single_copy_runs = shm_ ? shm_->single_copy_runs() : 0;
    const int64_t kept_runs = shm_ ? shm_->kept_on_cpu_runs() : 0;
    status = Run(resp, entries, recording ? &marks_ : nullptr);
    if (shm_) stats->shm_small_chunk_batches += shm_->shared_cache_runs() - small_chunk_runs;
    ran_single_copy_ = shm_ && shm_->single_copy_runs() != single_copy_runs;
    if (ran_single_copy_) ++stats->shm_single_copy_batches;
    if (shm_) stats->shm_kept_on_cpu_batches += shm_->kept_on_cpu_runs() - kept_runs;
    // A lost rank fails the batch with the one error elastic training recovers from.
    if (!status.ok() && PeerLost()) status = PeerLostStatus();
  }
  const bool on_device = status.ok() && !resp.is_error() && resp.gpu;
  if (on_device) MarkPhaseIfRecording(resp, recording);
  if (recording) Record(resp, entries, status, start, Timeline::Clock::now());

  scratch_.Trim(static_cast<size_t>(std::max<int64_t>(0, ScratchBound(fusion_threshold))));
  stats->scratch_bytes = static_cast<int64_t>(scratch_.capacity());

  int64_t bytes = 0;
  for (auto& e : entries) bytes += e.NumBytes();
  stats->bytes += bytes;
  stats->tensors += static_cast<int64_t>(own);
  if (entries.size() > 1) stats->fused_batches++;
  if (!resp.is_error() && RunsHierarchical(Context(nullptr), resp.op)) stats->hierarchical_batches++;
  if (on_device) {
    // The transport copies what it needs from the stand-ins before returning.
    device_->Start(resp, std::move(entries), nullptr);
  } else {
    Finish(entries, status);
  }
  stand_ins_.Clear();
}

void OperationManager::Finish(std::vector<TensorEntry>& entries, const Status& status) {
  StageProbe::Stamp(kProbeDone);
  // One task per scheduler named; a batch rarely holds more than one.
  std::vector<std::pair<const FrameworkScheduler*, std::vector<std::function<void(const Status&)>>>> tasks;
  for (auto& e : entries) {
    if (e.finish_on == nullptr) {
      e.done(status);
      continue;
    }
    auto task = std::find_if(tasks.begin(), tasks.end(), [&](const auto& t) { return t.first == e.finish_on; });
    if (task == tasks.end()) task = tasks.insert(tasks.end(), {e.finish_on, {}});
    task->second.push_back(std::move(e.done));
  }
  for (auto& [scheduler, dones] : tasks) {
    (*scheduler)([dones = std::move(dones), status]() {
      for (const auto& done : dones) done(status);
    });
  }
}

void OperationManager::MarkPhaseIfRecording(const Response& resp, bool recording) {
  // The timeline shows when NCCL work was queued; it completes later.
  if (recording) marks_.Begin(resp.op == OpType::kAllreduce ? "NCCL_ALLREDUCE" : "NCCL_COLLECTIVE");
}

void OperationManager::Record(const Response& resp, const std::vector<TensorEntry>& entries,
                              const Status& status, Timeline::Clock::time_point start,
                              Timeline::Clock::time_point end) {
  std::vector<PhaseMarks::Mark> marks = marks_.marks();
  if (marks.empty()) marks.push_back({PhaseName(resp.op), start});
  const bool shm = resp.op == OpType::kAllreduce && shm_ != nullptr;
  const char* transport = resp.gpu                                         ? "nccl"
                          : RunsHierarchical(Context(nullptr), resp.op)     ? "hierarchical"
                          : shm && ran_single_copy_                         ? "shm-single-copy"
                          : shm                                             ? "shm"
                                                                            : "mpi";
  for (const TensorEntry& e : entries) {
    for (size_t m = 0; m < marks.size(); ++m) {
      Timeline::Args args;
      const bool collective = std::strncmp(marks[m].phase, "MEMCPY", 6) != 0;
      if (collective) {
        args.bytes = e.NumBytes();
        args.tensors_in_batch = static_cast<int64_t>(entries.size());
        args.transport = transport;
        args.process_set = process_set_id_;
        if (!status.ok()) args.error = status.message();
      }
      const auto phase_end = m + 1 < marks.size() ? marks[m + 1].at : end;
      timeline_->Phase(e.name, marks[m].phase, marks[m].at, phase_end, std::move(args));
    }
  }
  if (entries.empty()) {  // an error for tensors this rank never held
    for (const std::string& name : resp.names) {
      Timeline::Args args;
      args.error = status.message();
      args.process_set = process_set_id_;
      timeline_->Phase(name, PhaseName(resp.op), start, end, std::move(args));
    }
  }
}

Status OperationManager::Run(const Response& resp, std::vector<TensorEntry>& entries,
                             PhaseMarks* marks) {
  const CollectiveContext ctx = Context(marks);
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
    case OpType::kBarrier:
      // Nothing to move: the negotiation already waited for every rank.
      return Status::OK();
    default:
      return Status::InvalidArgument(std::string(OpTypeName(resp.op)) +
                                     " is not supported by this build");
  }
}

}  // namespace tf_ring
