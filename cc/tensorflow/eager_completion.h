// Finishing a small eager collective on the caller's own thread.
//
// Run eagerly, TensorFlow calls an async kernel on the Python thread and
// then puts that thread to sleep until the kernel calls done. Waking it
// from the engine thread, and TensorFlow's bookkeeping there, cost 1.5-2 us
// of a lone 4 KB allreduce's 15 us here (benchmarks/README.md). So for a
// small tensor run eagerly, the kernel hands the engine
// a callback that only marks the op finished, waits a short while on its
// own thread (yielding the core at every look, so the engine and the other
// ranks can run), and calls done itself. When the wait runs out, the
// engine's callback calls done as before; one compare-and-swap decides
// which of the two does, so done runs exactly once.
#ifndef TF_RING_TENSORFLOW_EAGER_COMPLETION_H_
#define TF_RING_TENSORFLOW_EAGER_COMPLETION_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "tensorflow/core/framework/op_kernel.h"

namespace tf_ring {

class EagerCompletion {
 public:
  using DoneCallback = std::function<void()>;

  // Whether a kernel run eagerly (the Python wrappers set the op's `eager`
  // attr; in a tf.function or a v1 graph a waiting thread would hold back the
  // executor's other ops) in `ctx` on `bytes` of input should wait inline:
  // a host tensor, a small one, and a wait allowed (common/negotiation/caller_wait.h).
  static bool Applies(::tensorflow::OpKernelContext* ctx, int64_t bytes);

  // Wraps `done` for the engine: the returned callback marks the op
  // finished, or calls `done` when the caller has stopped waiting.
  // `process_set`: the op's set, whose caller_finished counter counts it.
  EagerCompletion(DoneCallback done, int32_t process_set);
  DoneCallback ForEngine();
  // Waits up to the configured time; calls `done` here if the engine
  // finished in time, otherwise leaves it to the engine's callback.
  void WaitAndFinish();

 private:
  struct State;
  std::shared_ptr<State> state_;
  int32_t process_set_;
};

}  // namespace tf_ring

#endif  // TF_RING_TENSORFLOW_EAGER_COMPLETION_H_
