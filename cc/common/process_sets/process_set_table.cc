#include "common/process_sets/process_set_table.h"

#include <algorithm>

namespace tf_ring {

Status ProcessSetTable::Submit(int32_t id, std::vector<TensorEntry> entries,
                               std::vector<Request> requests) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string what = entries.empty()
                               ? std::string("collective")
                               : std::string(OpTypeName(entries[0].op)) + " of tensor '" + entries[0].name + "'";
  auto it = sets_.find(id);
  if (it == sets_.end()) {
    return Status::InvalidArgument(what + ": process set " + std::to_string(id) +
                                   " is not registered (never added, or removed). Register it with "
                                   "init(process_sets=[...]) or add_process_set() on every rank.");
  }
  ProcessSet& set = *it->second;
  for (Request& r : requests) {
    if (!set.included()) break;
    r.rank = set.set_rank();
    if (r.op != OpType::kBroadcast) continue;
    const int root = set.SetRankOf(r.root_rank);
    if (root < 0) {
      return Status::InvalidArgument(what + ": root_rank " + std::to_string(r.root_rank) +
                                     " is not a member of process set " + set.Describe() +
                                     "; pass the (global) rank of one of its members.");
    }
    r.root_rank = root;
  }
  if (!set.included()) {
    return Status::InvalidArgument(
        what + ": this rank (" + std::to_string(set.my_rank()) + ") is not a member of process set " +
        set.Describe() +
        ", so it cannot take part in the set's collectives. Call them only on the set's ranks "
        "(where process_set.included() is True).");
  }
  if (entries.size() == 1) return set.queue().Add(std::move(entries[0]), std::move(requests[0]));
  return set.queue().AddGroup(std::move(entries), std::move(requests));
}

bool ProcessSetTable::Ranks(int32_t id, std::vector<int>* ranks) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(id);
  if (it == sets_.end()) return false;
  *ranks = it->second->ranks();
  return true;
}

std::vector<int32_t> ProcessSetTable::Ids() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int32_t> ids;
  for (auto& kv : sets_) ids.push_back(kv.first);
  return ids;
}

Status ProcessSetTable::Add(const std::vector<std::vector<int>>& sets,
                            const std::vector<int32_t>& at_ids, int32_t next_id, int my_rank,
                            MPI_Comm world,
                            const ProcessSetOptions& options, std::vector<int32_t>* ids) {
  // All or nothing: every rank reaches the same verdict before any set exists.
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < at_ids.size(); ++i) {
    const bool repeated = std::count(at_ids.begin(), at_ids.begin() + i, at_ids[i]) > 0;
    if (at_ids[i] < 1 || repeated || sets_.count(at_ids[i])) {
      return Status::InvalidArgument("process set id " + std::to_string(at_ids[i]) +
                                     " is taken or invalid; cannot restore a set under it.");
    }
  }
  for (size_t i = 0; i < sets.size() && at_ids.empty(); ++i) {
    for (auto& kv : sets_) {
      if (kv.second->ranks() == sets[i]) {
        return Status::InvalidArgument("process set " + kv.second->Describe() +
                                       " is already registered; register each set of ranks once.");
      }
    }
    for (size_t j = 0; j < i; ++j) {
      if (sets[j] == sets[i]) {
        std::string ranks;
        for (size_t k = 0; k < sets[i].size(); ++k) ranks += (k ? ", " : "") + std::to_string(sets[i][k]);
        return Status::InvalidArgument("the process set of ranks " + ranks +
                                       " appears twice in the sets to register; list each set once.");
      }
    }
  }
  for (size_t i = 0; i < sets.size(); ++i) {
    const int32_t id = at_ids.empty() ? next_id_ : at_ids[i];
    auto set = std::make_shared<ProcessSet>(id, sets[i], my_rank);
    if (set->included()) {
      Status s = set->Connect(world, options);
      if (!s.ok()) return s;
    }
    sets_[id] = set;
    ids->push_back(id);
    next_id_ = std::max(next_id_, id + 1);  // later sets never reuse a restored id
  }
  next_id_ = std::max(next_id_, next_id);
  return Status::OK();
}

Status ProcessSetTable::Remove(int32_t id) {
  std::shared_ptr<ProcessSet> set;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sets_.find(id);
    if (it == sets_.end()) {
      return Status::InvalidArgument("remove_process_set: process set " + std::to_string(id) +
                                     " is not registered (never added, or already removed).");
    }
    set = it->second;
    sets_.erase(it);
  }
  const Status removed = Status::Aborted("process set " + set->Describe() +
                                         " was removed while this collective was pending.");
  for (TensorEntry& e : set->Close()) e.done(removed);
  return Status::OK();
}

std::vector<std::shared_ptr<ProcessSet>> ProcessSetTable::Mine() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<ProcessSet>> mine;
  for (auto& kv : sets_) {
    if (kv.second->included()) mine.push_back(kv.second);
  }
  return mine;
}

std::vector<TensorEntry> ProcessSetTable::CloseAll() {
  std::map<int32_t, std::shared_ptr<ProcessSet>> sets;
  {
    std::lock_guard<std::mutex> lock(mu_);
    sets.swap(sets_);
    next_id_ = 1;
  }
  std::vector<TensorEntry> pending;
  for (auto& kv : sets) {
    for (TensorEntry& e : kv.second->Close()) pending.push_back(std::move(e));
  }
  return pending;
}

size_t ProcessSetTable::entries_in_flight() {
  size_t n = 0;
  for (auto& set : Mine()) {
    // A member waiting in join() is idle, as the global join counts it.
    const size_t queued = set->queue().entries_in_flight();
    n += queued - (set->joined_here() && queued > 0 ? 1 : 0);
  }
  return n;
}

std::shared_ptr<ProcessSet> ProcessSetTable::Find(int32_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(id);
  return it == sets_.end() ? nullptr : it->second;
}

void ProcessSetTable::ResetStats() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& kv : sets_) ResetCounters(&kv.second->stats());
}

}  // namespace tf_ring
