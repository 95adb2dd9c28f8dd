// The thread that finishes GPU collectives. The engine thread only queues
// device work and hands each batch here with an event recorded after it;
// this thread polls the events in order (one stream, so they complete in
// order) and calls the entries' done callbacks. The negotiation loop never
// waits on the GPU.
#ifndef TF_RING_COMMON_GPU_COMPLETION_WATCHER_H_
#define TF_RING_COMMON_GPU_COMPLETION_WATCHER_H_

#include <cuda_runtime_api.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/base/status.h"
#include "common/base/tensor_entry.h"

namespace tf_ring {

// One response's device work: the entries it completes and what it holds
// until the device is done with it.
struct DeviceBatch {
  std::string description;  // "allreduce of tensor 'a'" or "... 'a', 'b' and 3 more"
  cudaEvent_t event = nullptr;  // recorded after the batch's last device call
  std::vector<TensorEntry> entries;
  std::vector<void*> device_temps;  // joined-rank stand-ins, freed once complete
  Status failure;  // set when queuing failed: the batch fails once its event completes
};

class CompletionWatcher {
 public:
  // `health` is polled while work is pending and returns non-OK once the
  // communicator failed (a dead peer); `on_failure` then aborts it, and
  // every batch in flight fails with that status.
  void Start(int device, std::function<Status()> health, std::function<void(const Status&)> on_failure);
  void Add(std::unique_ptr<DeviceBatch> batch);
  bool running() const { return thread_.joinable(); }
  // Waits up to `grace` for the work in flight, then calls `abort` if some
  // is left (so no kernel waits forever), fails the rest with `reason`,
  // and joins the thread. Safe to call when not started.
  void Stop(std::chrono::milliseconds grace, const std::function<void()>& abort, const std::string& reason);

  // Completes `batch` with `status` (its description is prefixed to errors).
  static void Finish(DeviceBatch* batch, const Status& status, bool device_done);

 private:
  void Loop();

  int device_ = 0;
  std::function<Status()> health_;
  std::function<void(const Status&)> on_failure_;
  std::mutex mu_;
  std::condition_variable cv_;       // work arrived, or stopping
  std::condition_variable drained_;  // the queue became empty
  std::deque<std::unique_ptr<DeviceBatch>> queue_;
  bool stopping_ = false;
  Status stop_status_;  // what the batches left at Stop fail with
  std::thread thread_;
};

}  // namespace tf_ring

#endif  // TF_RING_COMMON_GPU_COMPLETION_WATCHER_H_
