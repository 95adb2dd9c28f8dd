#include "tensorflow/eager_completion.h"

#include <sched.h>

#include <atomic>
#include <chrono>

#include "common/engine.h"

namespace tf_ring {

namespace {

// Above this a collective takes longer than the wait, so waiting would only
// burn a core the engine needs.
constexpr int64_t kMaxInlineBytes = 64 << 10;

enum : int { kPending = 0, kEngineFinished = 1, kCallerLeft = 2 };

}  // namespace

struct EagerCompletion::State {
  std::atomic<int> phase{kPending};
  DoneCallback done;
};

bool EagerCompletion::Applies(::tensorflow::OpKernelContext* ctx, int64_t bytes) {
  // A GPU op (it has a device context) finishes on the GPU's time, far
  // beyond the wait.
  return ctx->op_device_context() == nullptr && bytes <= kMaxInlineBytes &&
         Engine::Get().caller_wait_us() > 0;
}

EagerCompletion::EagerCompletion(DoneCallback done, int32_t process_set)
    : state_(std::make_shared<State>()), process_set_(process_set) {
  state_->done = std::move(done);
}

EagerCompletion::DoneCallback EagerCompletion::ForEngine() {
  std::shared_ptr<State> state = state_;
  return [state]() {
    int expected = kPending;
    // acq_rel: the results and the status written before this are seen by
    // the caller that reads kEngineFinished.
    if (!state->phase.compare_exchange_strong(expected, kEngineFinished, std::memory_order_acq_rel)) {
      state->done();  // the caller stopped waiting
    }
  };
}

void EagerCompletion::WaitAndFinish() {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::microseconds(Engine::Get().caller_wait_us());
  while (state_->phase.load(std::memory_order_acquire) == kPending) {
    if (std::chrono::steady_clock::now() >= deadline) {
      int expected = kPending;
      if (state_->phase.compare_exchange_strong(expected, kCallerLeft, std::memory_order_acq_rel)) return;
      break;  // the engine finished just now
    }
    sched_yield();  // the engine thread may need this core
  }
  Engine::Get().CountCallerFinished(process_set_);  // counted before the op completes, as all stats
  state_->done();
}

}  // namespace tf_ring
