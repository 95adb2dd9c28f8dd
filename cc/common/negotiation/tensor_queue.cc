#include "common/negotiation/tensor_queue.h"

#include <algorithm>
#include <string_view>
#include <thread>
#include <unordered_set>

namespace tf_ring {

Status TensorQueue::Add(TensorEntry entry, Request request) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (entries_.count(entry.name)) {
      Status refused = Status::InvalidArgument(
          std::string(OpTypeName(entry.op)) + " of tensor '" + entry.name +
          "': a collective with this name is already in flight on this rank. "
          "Give concurrent collectives distinct names (the name= argument).");
      ReportLocked(std::move(request), refused);
      return refused;
    }
    std::string name = entry.name;
    entries_.emplace(std::move(name), std::move(entry));
    request.enqueued_at = std::chrono::steady_clock::now();
    requests_.push_back(std::move(request));
    ready_.store(true, std::memory_order_release);
  }
  cv_.notify_one();
  return Status::OK();
}

Status TensorQueue::AddGroup(std::vector<TensorEntry> entries, std::vector<Request> requests) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A set of the group's own names keeps the check linear: a group is
    // often a model's hundreds of gradients, and this runs under the lock.
    std::unordered_set<std::string_view> group_names;
    group_names.reserve(entries.size());
    for (size_t i = 0; i < entries.size(); ++i) {
      const bool repeated = entries_.count(entries[i].name) > 0 || !group_names.insert(entries[i].name).second;
      if (repeated) {
        Status refused = Status::InvalidArgument(
            std::string(OpTypeName(entries[i].op)) + " of tensor '" + entries[i].name +
            "': a collective with this name is already in flight on this rank. "
            "Give concurrent collectives distinct names (the name= argument).");
        ReportLocked(std::move(requests[i]), refused);
        return refused;
      }
    }
    const auto now = std::chrono::steady_clock::now();
    for (size_t i = 0; i < entries.size(); ++i) {
      requests[i].enqueued_at = now;
      std::string name = entries[i].name;
      entries_.emplace(std::move(name), std::move(entries[i]));
      requests_.push_back(std::move(requests[i]));
    }
    ready_.store(true, std::memory_order_release);
  }
  cv_.notify_one();
  return Status::OK();
}

void TensorQueue::ReportLocked(Request request, const Status& refused) {
  // Called with mu_ held; the caller returns `refused` to its framework.
  request.local_error = refused.message();
  request.enqueued_at = std::chrono::steady_clock::now();
  requests_.push_back(std::move(request));
  ready_.store(true, std::memory_order_release);
  cv_.notify_one();
}

void TensorQueue::WaitForWork(std::chrono::microseconds timeout,
                              std::chrono::microseconds spin) {
  if (spin.count() > 0 && timeout.count() > 0) {
    const auto start = std::chrono::steady_clock::now();
    const auto spin_until = start + std::min(spin, timeout);
    // yield() hands the core to any runnable thread (TensorFlow's, the
    // peer rank's): on a machine with as many ranks as cores, a spin that
    // kept the core would slow the very op it waits for.
    while (!ready_.load(std::memory_order_acquire) &&
           std::chrono::steady_clock::now() < spin_until) {
      std::this_thread::yield();
    }
    timeout -= std::chrono::duration_cast<std::chrono::microseconds>(
        std::chrono::steady_clock::now() - start);
    if (timeout.count() < 0) timeout = std::chrono::microseconds(0);
  }
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [this] { return !requests_.empty() || woken_; });
  woken_ = false;
  ready_.store(!requests_.empty(), std::memory_order_relaxed);
}

void TensorQueue::WaitForBurstEnd(std::chrono::microseconds window) {
  if (window.count() <= 0) return;
  const auto deadline = std::chrono::steady_clock::now() + window;
  std::unique_lock<std::mutex> lock(mu_);
  size_t seen = requests_.size();
  // Each arrival earns one more quiet slice; stop at the first quiet one.
  const auto slice = std::max(std::chrono::microseconds(20), window / 10);
  while (!woken_ && std::chrono::steady_clock::now() < deadline) {
    cv_.wait_for(lock, slice, [&] { return requests_.size() != seen || woken_; });
    if (requests_.size() == seen) break;
    seen = requests_.size();
  }
}

void TensorQueue::Wake() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    woken_ = true;
    ready_.store(true, std::memory_order_release);
  }
  cv_.notify_one();
}

std::vector<Request> TensorQueue::TakeRequests() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Request> out(std::make_move_iterator(requests_.begin()),
                           std::make_move_iterator(requests_.end()));
  requests_.clear();
  ready_.store(woken_, std::memory_order_relaxed);
  return out;
}

bool TensorQueue::TakeEntry(const std::string& name, TensorEntry* out) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(name);
  if (it == entries_.end()) return false;
  *out = std::move(it->second);
  entries_.erase(it);
  return true;
}

std::vector<TensorEntry> TensorQueue::TakeAllEntries() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<TensorEntry> out;
  for (auto& kv : entries_) out.push_back(std::move(kv.second));
  entries_.clear();
  requests_.clear();
  ready_.store(woken_, std::memory_order_relaxed);
  return out;
}

bool TensorQueue::Describe(const std::string& name, std::vector<int64_t>* shape, DataType* dtype) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(name);
  if (it == entries_.end()) return false;
  *shape = it->second.shape;
  *dtype = it->second.dtype;
  return true;
}

size_t TensorQueue::entries_in_flight() {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

}  // namespace tf_ring
