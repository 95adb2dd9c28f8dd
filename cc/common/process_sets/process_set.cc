#include "common/process_sets/process_set.h"

#include <algorithm>

#include "common/negotiation/fusion.h"
#include "common/observability/logging.h"
#include "common/transport/peer_failure.h"

namespace tf_ring {

ProcessSet::ProcessSet(int32_t id, std::vector<int> ranks, int my_rank)
    : id_(id), ranks_(std::move(ranks)), set_rank_([&] {
        auto it = std::find(ranks_.begin(), ranks_.end(), my_rank);
        return it == ranks_.end() ? -1 : static_cast<int>(it - ranks_.begin());
      }()),
      my_rank_(my_rank) {}

ProcessSet::~ProcessSet() = default;

int ProcessSet::SetRankOf(int rank) const {
  auto it = std::find(ranks_.begin(), ranks_.end(), rank);
  return it == ranks_.end() ? -1 : static_cast<int>(it - ranks_.begin());
}

std::string ProcessSet::Describe() const {
  std::string s = std::to_string(id_) + " (ranks ";
  for (size_t i = 0; i < ranks_.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks_[i]);
  return s + ")";
}

Status ProcessSet::Connect(MPI_Comm world, const ProcessSetOptions& options) {
  Status s = mpi_.InitGroup(world, ranks_, id_);
  if (!s.ok()) return s;
  connected_ = true;
  // The set chooses its paths as the global set does, from its own members'
  // layout: shared memory when they share one host, hierarchical across
  // hosts (shared memory in each, MPI across), else plain MPI. GPU tensors
  // go over the set's own NCCL communicator, made on its first GPU
  // collective (OperationManager's device transport). Autotune belongs to
  // the global set.
  HostCounts counts;
  counts.shm_allowed = options.shm_area_bytes > 0;
  s = hosts_.Init(mpi_, &counts);
  if (!s.ok()) return s;
  hierarchical_ = ChooseHierarchical(options.hierarchical, counts).hierarchical;
  const bool one_host = mpi_.local_size() == mpi_.size();
  ShmSegment* shm = nullptr;
  if (mpi_.size() > 1 && ((one_host && counts.shm_allowed) || hierarchical_)) {
    s = shm_.InitEverywhere(mpi_.comm(), mpi_.local_comm(), options.shm_area_bytes,
                            options.shm_fallback_bytes, options.shm_single_copy, my_rank_);
    if (!s.ok()) return s;
    shm_.AllowSharedCacheChunks(mpi_.local_comm(), options.shm_shared_cache_chunk_bytes);
    shm = &shm_;
    if (FaultTolerantMode() && !ShmSegment::WatchedEverywhere(mpi_.comm(), shm)) {
      // A dead member would hang the others: MPI instead.
      shm_.Release();
      shm = nullptr;
      hierarchical_ = false;
    }
  }
  controller_ = options.MakeController(&mpi_);
  controller_->DescribeRanksAs(ranks_, "process set " + Describe() + ": ");
  if (shm != nullptr && one_host) controller_->RoundOverSharedMemory(shm);
  timeline_ = options.timeline;  // shared with the global set; events carry the set's id
  operations_ = std::make_unique<OperationManager>(&mpi_, shm, hierarchical_ ? &hosts_ : nullptr,
                                                   options.timeline);
  operations_->set_process_set(id_);
  return Status::OK();
}

std::unique_ptr<Controller> ProcessSetOptions::MakeController(const MpiContext* mpi) const {
  auto controller = std::make_unique<Controller>(
      mpi, cache_capacity, StallConfig{stall_check_seconds, stall_shutdown_seconds, crossed_wait_seconds});
  controller->LetCacheGrowTo(cache_limit);
  return controller;
}

std::string ProcessSet::RunCycle(int64_t fusion_threshold) {
  ResponseList responses;
  CycleCounts counts;
  std::vector<Request> requests = queue_.TakeRequests();
  for (const Request& r : requests) {
    if (r.op == OpType::kJoin) joined_here_ = true;
  }
  if (timeline_ != nullptr && timeline_->active()) {
    const auto now = Timeline::Clock::now();
    for (const Request& r : requests) {
      Timeline::Args args;
      args.process_set = id_;
      timeline_->Phase(r.name, "QUEUE", r.enqueued_at, now, std::move(args));
    }
  }
  Status st = controller_->RunCycle(std::move(requests), false, &responses, &counts);
  stats_.cycles++;
  stats_.negotiations += counts.negotiations;
  stats_.cache_hits += counts.cache_hits;
  stats_.cache_misses += counts.cache_misses;
  if (!st.ok()) Log(LogLevel::kError, "process set " + Describe() + ": " + st.message());
  const int size = mpi_.size();
  std::vector<Response> batches =
      FuseResponses(std::move(responses.responses), fusion_threshold,
                    [this, size](const Response& r) { return ResponsePayloadBytes(r, &queue_, size); });
  for (Response& resp : batches) {
    if (resp.op == OpType::kJoin && !resp.is_error()) {
      // The coordinator counts set ranks; join() returns an engine rank.
      joined_here_ = false;
      resp.root_rank = ranks_[resp.root_rank];
    }
    operations_->Execute(resp, &queue_, &stats_, fusion_threshold);
  }
  // The reason names the set already (the controller's scope).
  return responses.shutdown ? responses.shutdown_reason : std::string();
}

std::vector<TensorEntry> ProcessSet::Close() {
  if (operations_) operations_->Stop(false, "process set " + Describe() + " closed");
  shm_.Release(/*abort_waiters=*/PeerLost());
  if (connected_) mpi_.Release();
  connected_ = false;
  std::vector<TensorEntry> pending = queue_.TakeAllEntries();
  stats_.tensors += static_cast<int64_t>(pending.size());  // the caller fails them
  return pending;
}

}  // namespace tf_ring
