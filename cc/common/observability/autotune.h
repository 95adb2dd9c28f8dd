// Autotune: rank 0 tries fusion thresholds, then cycle times, measuring the
// bytes the engine moves per second under each, and settles on the best
// pair. It only decides; the controller carries each decision to every rank
// in a negotiation so all ranks switch at the same cycle. Pure logic (no MPI),
// so it is unit tested alone.
#ifndef TF_RING_COMMON_AUTOTUNE_H_
#define TF_RING_COMMON_AUTOTUNE_H_

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace tf_ring {

struct EngineParams {
  int64_t fusion_threshold = 0;  // bytes
  int64_t cycle_time_us = 0;
  bool operator==(const EngineParams& o) const {
    return fusion_threshold == o.fusion_threshold && cycle_time_us == o.cycle_time_us;
  }
};

struct AutotuneConfig {
  int warmup_samples = 1;       // samples discarded after each change
  int samples_per_trial = 3;    // the trial's score is their median
  int cycles_per_sample = 10;   // engine cycles that ran work, per sample
  std::vector<int64_t> fusion_thresholds = {1 << 20, 4 << 20, 16 << 20, 32 << 20, 64 << 20,
                                            128 << 20};
  std::vector<int64_t> cycle_times_us = {0, 500, 1000, 2500, 5000};
  std::string log_path;  // CSV of trials; empty: none
};

class Autotuner {
 public:
  using Clock = std::chrono::steady_clock;

  Autotuner(EngineParams initial, AutotuneConfig config);
  ~Autotuner();

  // The parameters to use from the start (the first trial).
  EngineParams first() const { return current_; }
  // Called after every cycle that ran collectives, with the payload bytes
  // it moved. Returns true when the parameters should change to `*next`.
  bool Observe(int64_t bytes, Clock::time_point now, EngineParams* next);
  bool settled() const { return settled_; }
  // One line for the log once settled.
  std::string Summary() const;

 private:
  struct Trial {
    EngineParams params;
    double score = 0;  // bytes per second
  };
  void FinishTrial();
  void WriteCsv(const Trial& t, const char* kind);

  AutotuneConfig config_;
  std::vector<EngineParams> queue_;  // trials still to run in this stage
  std::vector<Trial> done_;
  int stage_ = 0;                    // 0: fusion threshold, 1: cycle time
  EngineParams current_;
  bool settled_ = false;
  int samples_ = 0;                  // samples taken in this trial (warm-up included)
  std::vector<double> scores_;
  int cycles_ = 0;
  int64_t bytes_ = 0;
  Clock::time_point sample_start_;
  bool sample_started_ = false;
  FILE* csv_ = nullptr;
};

}  // namespace tf_ring

#endif  // TF_RING_COMMON_AUTOTUNE_H_
