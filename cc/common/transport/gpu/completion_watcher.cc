#include "common/transport/gpu/completion_watcher.h"

#include "common/transport/gpu/cuda_check.h"

namespace tf_ring {

namespace {
// Poll without sleeping for this long after work arrives: a small
// collective finishes within microseconds and its latency is the point.
constexpr std::chrono::microseconds kSpinFor(2000);
constexpr std::chrono::microseconds kSleepBetweenPolls(50);
}  // namespace

void CompletionWatcher::Start(int device, std::function<Status()> health,
                              std::function<void(const Status&)> on_failure) {
  device_ = device;
  health_ = std::move(health);
  on_failure_ = std::move(on_failure);
  stopping_ = false;
  thread_ = std::thread(&CompletionWatcher::Loop, this);
}

void CompletionWatcher::Add(std::unique_ptr<DeviceBatch> batch) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(batch));
  }
  cv_.notify_one();
}

void CompletionWatcher::Finish(DeviceBatch* batch, const Status& status, bool device_done) {
  Status result = status.ok() ? status : status.WithPrefix(batch->description + ": ");
  for (TensorEntry& e : batch->entries) e.done(result);
  batch->entries.clear();  // drops the producers' ready events
  // After a failure the device may still be stuck in the batch's kernels:
  // freeing would wait for them, so a failed batch leaks its stand-ins.
  if (device_done) {
    for (void* p : batch->device_temps) cudaFree(p);
  }
  if (batch->event) cudaEventDestroy(batch->event);
}

void CompletionWatcher::Loop() {
  cudaSetDevice(device_);
  auto busy_since = std::chrono::steady_clock::now();
  for (;;) {
    DeviceBatch* front = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (queue_.empty()) {
        drained_.notify_all();
        cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        busy_since = std::chrono::steady_clock::now();
      }
      if (stopping_) {
        // Stop() already aborted the communicator if work was left.
        while (!queue_.empty()) {
          Finish(queue_.front().get(), stop_status_, false);
          queue_.pop_front();
        }
        drained_.notify_all();
        return;
      }
      front = queue_.front().get();
    }
    const cudaError_t err = cudaEventQuery(front->event);
    if (err == cudaErrorNotReady) {
      Status health = health_();
      if (!health.ok()) {
        on_failure_(health);
        std::lock_guard<std::mutex> lock(mu_);
        while (!queue_.empty()) {
          Finish(queue_.front().get(), health, false);
          queue_.pop_front();
        }
        continue;
      }
      if (std::chrono::steady_clock::now() - busy_since < kSpinFor) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(kSleepBetweenPolls);
      }
      continue;
    }
    // Done, or a CUDA error (which fails this batch only).
    Status result = CudaStatus(err, "the GPU work", front->description);
    Finish(front, result.ok() ? front->failure : result, err == cudaSuccess);
    std::lock_guard<std::mutex> lock(mu_);
    queue_.pop_front();
    busy_since = std::chrono::steady_clock::now();
  }
}

void CompletionWatcher::Stop(std::chrono::milliseconds grace, const std::function<void()>& abort,
                             const std::string& reason) {
  if (!thread_.joinable()) return;
  {
    std::unique_lock<std::mutex> lock(mu_);
    const bool drained = drained_.wait_for(lock, grace, [this] { return queue_.empty(); });
    if (!drained) abort();
    stop_status_ = Status::Aborted(reason);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

}  // namespace tf_ring
