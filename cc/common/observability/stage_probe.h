// Where a lone collective's time goes: the last op's steady_clock stamps at
// each hand-off (kernel submit, engine cycle takes it, negotiation agreed,
// completion callback), read by benchmarks/latency_stages.py. Off unless a
// benchmark turns it on, so the hot path pays one relaxed load per stamp.
// steady_clock is CLOCK_MONOTONIC here, the clock of Python's
// time.perf_counter_ns(), so Python's own stamps line up with these.
#ifndef TF_RING_COMMON_STAGE_PROBE_H_
#define TF_RING_COMMON_STAGE_PROBE_H_

#include <atomic>
#include <chrono>
#include <cstdint>

namespace tf_ring {

enum ProbeStage : int { kProbeSubmit = 0, kProbeTaken, kProbeAgreed, kProbeDone, kProbeStages };

class StageProbe {
 public:
  static void Enable(bool on) { enabled_.store(on, std::memory_order_relaxed); }
  static bool enabled() { return enabled_.load(std::memory_order_relaxed); }
  static void Stamp(ProbeStage stage) {
    if (!enabled()) return;
    stamps_[stage].store(NowNs(), std::memory_order_relaxed);
  }
  // Nanoseconds on CLOCK_MONOTONIC; 0 for a stage not stamped since Enable.
  static int64_t Read(ProbeStage stage) { return stamps_[stage].load(std::memory_order_relaxed); }
  static void Clear() {
    for (auto& s : stamps_) s.store(0, std::memory_order_relaxed);
  }

 private:
  static int64_t NowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  static inline std::atomic<bool> enabled_{false};
  static inline std::atomic<int64_t> stamps_[kProbeStages] = {};
};

}  // namespace tf_ring

#endif  // TF_RING_COMMON_STAGE_PROBE_H_
