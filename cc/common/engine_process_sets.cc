// Engine's process-set entry points: collective add/remove (applied by the
// background thread when an allgather of every rank's ask completes) and
// lookups for the adapters.
#include <condition_variable>
#include <mutex>

#include "common/engine.h"
#include "common/engine_impl.h"
#include "common/observability/logging.h"
#include "common/process_sets/process_set_change.h"

namespace tf_ring {

namespace {
// One name on every rank, so the asks meet in one allgather; a second change
// while one is pending fails as "already in flight".
constexpr char kChangeTensorName[] = "tf_ring.process_sets";
}  // namespace

Status Engine::AddProcessSets(const std::vector<std::vector<int>>& sets, std::vector<int32_t>* ids) {
  ProcessSetChange change;
  change.kind = ProcessSetChange::kAdd;
  change.sets = sets;
  return ChangeProcessSets(EncodeProcessSetChange(change), ids);
}

Status Engine::RestoreProcessSets(const std::vector<std::vector<int>>& sets,
                                  const std::vector<int32_t>& at_ids, int32_t next_id) {
  if (at_ids.size() != sets.size()) {
    return Status::InvalidArgument("restoring process sets needs one id per set");
  }
  ProcessSetChange change;
  change.kind = ProcessSetChange::kAddAt;
  change.sets = sets;
  change.ids = at_ids;
  change.next_id = next_id;
  std::vector<int32_t> ids;
  return ChangeProcessSets(EncodeProcessSetChange(change), &ids);
}

Status Engine::RemoveProcessSet(int32_t id) {
  ProcessSetChange change;
  change.kind = ProcessSetChange::kRemove;
  change.remove_id = id;
  std::vector<int32_t> ids;
  return ChangeProcessSets(EncodeProcessSetChange(change), &ids);
}

Status Engine::ChangeProcessSets(const std::vector<int64_t>& ask, std::vector<int32_t>* ids) {
  struct Outcome {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    Status status;
    std::vector<int32_t> ids;
    std::vector<int64_t> gathered;
  };
  auto outcome = std::make_shared<Outcome>();
  const int world_size = topology_.size, my_rank = topology_.rank;

  TensorEntry entry;
  entry.name = kChangeTensorName;
  entry.op = OpType::kAllgather;
  entry.dtype = DataType::kInt64;
  entry.shape = {static_cast<int64_t>(ask.size())};
  entry.input = ask.data();  // alive: this call blocks until done
  entry.allocate_output = [outcome](int, const std::vector<int64_t>& shape, void** data) {
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    outcome->gathered.assign(static_cast<size_t>(count > 0 ? count : 1), 0);
    *data = outcome->gathered.data();
    return Status::OK();
  };
  // Runs on the background thread right after the allgather, at the same
  // point of the same cycle on every rank: the change applies there.
  entry.done = [this, outcome, world_size, my_rank](const Status& gathered) {
    Status result = gathered;
    std::vector<int32_t> new_ids;
    ProcessSetChange change;
    if (result.ok()) result = AgreedProcessSetChange(outcome->gathered, world_size, &change);
    if (result.ok() && change.kind != ProcessSetChange::kRemove) {
      ProcessSetOptions options = impl_->set_options;
      options.timeline = &timeline_;
      result = impl_->sets.Add(change.sets, change.ids, change.next_id, my_rank,
                               impl_->mpi.comm(), options, &new_ids);
    } else if (result.ok()) {
      result = impl_->sets.Remove(change.remove_id);
    }
    std::lock_guard<std::mutex> lock(outcome->mu);
    outcome->status = result;
    outcome->ids = std::move(new_ids);
    outcome->done = true;
    outcome->cv.notify_all();
  };
  Request request;
  request.op = OpType::kAllgather;
  request.dtype = DataType::kInt64;
  request.name = kChangeTensorName;
  request.shape = entry.shape;
  Status s = Enqueue(std::move(entry), std::move(request));
  if (!s.ok()) return s;
  std::unique_lock<std::mutex> lock(outcome->mu);
  outcome->cv.wait(lock, [&] { return outcome->done; });
  *ids = outcome->ids;
  return outcome->status;
}

bool Engine::ProcessSetRanks(int32_t id, std::vector<int>* ranks) {
  if (!started()) return false;
  if (id == 0) {
    ranks->clear();
    for (int r = 0; r < topology_.size; ++r) ranks->push_back(r);
    return true;
  }
  std::lock_guard<std::mutex> lock(accept_mu_);
  return accepting_ && impl_->sets.Ranks(id, ranks);
}

std::vector<int32_t> Engine::ProcessSetIds() {
  std::lock_guard<std::mutex> lock(accept_mu_);
  return accepting_ ? impl_->sets.Ids() : std::vector<int32_t>();
}

void Engine::CountCallerFinished(int32_t id) {
  if (id == 0) {
    ++stats_.caller_finished;
    return;
  }
  std::lock_guard<std::mutex> lock(accept_mu_);
  std::shared_ptr<ProcessSet> set = accepting_ ? impl_->sets.Find(id) : nullptr;
  if (set) ++set->stats().caller_finished;
}

bool Engine::ProcessSetStats(int32_t id, int64_t out[kStatCount]) {
  const EngineStats* s = &stats_;
  std::shared_ptr<ProcessSet> set;
  if (id != 0) {
    std::lock_guard<std::mutex> lock(accept_mu_);
    set = accepting_ ? impl_->sets.Find(id) : nullptr;
    if (!set) return false;
    s = &set->stats();
  }
  const int64_t values[kStatCount] = {s->cycles,        s->negotiations, s->cache_hits,
                                      s->cache_misses,  s->fused_batches, s->tensors,
                                      s->bytes,         s->hierarchical_batches, s->caller_finished,
                                      s->shm_small_chunk_batches, s->shm_single_copy_batches,
                                      s->shm_kept_on_cpu_batches, s->scratch_bytes};
  for (int i = 0; i < kStatCount; ++i) out[i] = values[i];
  return true;
}

}  // namespace tf_ring
