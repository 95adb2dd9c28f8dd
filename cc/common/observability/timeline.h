// Chrome trace-event timeline (opens in Perfetto and chrome://tracing).
//
// The engine thread records raw events (a few numbers each) under a short
// lock; a writer thread formats and appends them to the file every 100 ms.
// The file is a JSON array that is closed with "]" after every flush, so it
// stays valid JSON even when the job dies between flushes. Rank 0 writes it.
#ifndef TF_RING_COMMON_TIMELINE_H_
#define TF_RING_COMMON_TIMELINE_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/base/status.h"

namespace tf_ring {

// Extra facts shown in an event's "args".
struct TimelineArgs {
  int64_t bytes = -1;             // collective: payload bytes of this tensor
  int64_t tensors_in_batch = -1;  // collective: tensors fused with it
  const char* transport = nullptr;  // collective: "shm", "shm-single-copy", "mpi", ...
  const char* via = nullptr;        // negotiation: "cache" or "coordinator"
  std::vector<int> arrived;         // negotiation: ranks in arrival order
  std::vector<int> waited_for;      // negotiation: ranks that came late
  std::string error;
  int32_t process_set = 0;          // collective or queue: the set's id (0: global, not shown)
};


class Timeline {
 public:
  using Clock = std::chrono::steady_clock;

  using Args = TimelineArgs;

  ~Timeline() { Stop(); }

  Status Start(const std::string& path, bool mark_cycles);
  // Flushes and closes the file; a no-op when not started.
  void Stop();
  bool active() const { return active_.load(std::memory_order_relaxed); }
  bool marks_cycles() const { return mark_cycles_; }

  // One phase of one tensor's life ("QUEUE", "NEGOTIATE", "ALLREDUCE", ...).
  void Phase(const std::string& tensor, const char* phase, Clock::time_point start,
             Clock::time_point end, Args args = Args());
  void CycleMark(int64_t cycle, Clock::time_point when);

 private:
  struct Event {
    int tid;
    const char* phase;  // null: a metadata event naming row `tid` `label`
    int64_t start_ns, duration_ns;
    bool instant;
    int64_t cycle;
    std::string label;
    Args args;
  };

  int RowOf(const std::string& tensor);  // caller holds mu_
  void WriterLoop();
  void Flush(std::vector<Event>* events);
  void AppendFormatted(const Event& e, std::string* out) const;

  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> active_{false};
  bool stopping_ = false;
  bool mark_cycles_ = false;
  int fd_ = -1;
  int64_t close_offset_ = 0;  // where the closing "]" sits in the file
  Clock::time_point origin_;
  std::unordered_map<std::string, int> rows_;
  std::vector<Event> pending_;
  std::string chunk_;  // the writer thread's formatting buffer
  std::thread writer_;
};

}  // namespace tf_ring

#endif  // TF_RING_COMMON_TIMELINE_H_
