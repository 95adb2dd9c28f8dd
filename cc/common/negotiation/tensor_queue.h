// Hand-off between framework threads (which enqueue) and the engine thread
// (which takes requests each cycle and entries when their response runs).
#ifndef TF_RING_COMMON_TENSOR_QUEUE_H_
#define TF_RING_COMMON_TENSOR_QUEUE_H_

#include <chrono>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/base/message.h"
#include "common/base/tensor_entry.h"

namespace tf_ring {

class TensorQueue {
 public:
  // Fails (and keeps no entry) when the name is already in flight on this
  // rank; the refusal is queued as a report (Request::local_error) for the
  // coordinator, which fails what other ranks wait on.
  Status Add(TensorEntry entry, Request request);
  // Adds all or nothing in one step, so one cycle sees the whole group.
  Status AddGroup(std::vector<TensorEntry> entries, std::vector<Request> requests);

  // Blocks until a request is queued, Wake() is called, or `timeout` passes.
  // The first `spin` of it polls (yielding the core each time) instead of
  // sleeping: a futex wake-up costs a few microseconds, a lone op's whole
  // engine path about as much.
  void WaitForWork(std::chrono::microseconds timeout,
                   std::chrono::microseconds spin = std::chrono::microseconds(0));
  // Keeps waiting while requests keep arriving, up to `window` in all, so a
  // burst of enqueues lands in one cycle.
  void WaitForBurstEnd(std::chrono::microseconds window);
  void Wake();

  std::vector<Request> TakeRequests();
  // Moves the entry for `name` out; false if this rank has none.
  bool TakeEntry(const std::string& name, TensorEntry* out);
  // Everything still held, for failing at shutdown.
  std::vector<TensorEntry> TakeAllEntries();
  size_t entries_in_flight();
  // Shape and dtype of this rank's entry for `name`; false if it has none.
  bool Describe(const std::string& name, std::vector<int64_t>* shape, DataType* dtype);

 private:
  void ReportLocked(Request request, const Status& refused);

  std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<std::string, TensorEntry> entries_;
  std::deque<Request> requests_;
  bool woken_ = false;
  // Mirrors !requests_.empty() || woken_, for WaitForWork's lock-free polls.
  std::atomic<bool> ready_{false};
};

}  // namespace tf_ring

#endif  // TF_RING_COMMON_TENSOR_QUEUE_H_
