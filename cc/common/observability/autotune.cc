#include "common/observability/autotune.h"

#include <algorithm>

namespace tf_ring {

namespace {
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
}  // namespace

Autotuner::Autotuner(EngineParams initial, AutotuneConfig config) : config_(std::move(config)) {
  // Stage 0 varies the fusion threshold at the configured cycle time.
  for (int64_t f : config_.fusion_thresholds) queue_.push_back(EngineParams{f, initial.cycle_time_us});
  current_ = queue_.front();
  queue_.erase(queue_.begin());
  if (!config_.log_path.empty()) {
    csv_ = std::fopen(config_.log_path.c_str(), "w");
    if (csv_) {
      std::fprintf(csv_, "kind,fusion_threshold_bytes,cycle_time_ms,bytes_per_second\n");
      std::fflush(csv_);
    }
  }
}

Autotuner::~Autotuner() {
  if (csv_) std::fclose(csv_);
}

void Autotuner::WriteCsv(const Trial& t, const char* kind) {
  if (!csv_) return;
  std::fprintf(csv_, "%s,%lld,%.3f,%.0f\n", kind, static_cast<long long>(t.params.fusion_threshold),
               t.params.cycle_time_us / 1000.0, t.score);
  std::fflush(csv_);
}

bool Autotuner::Observe(int64_t bytes, Clock::time_point now, EngineParams* next) {
  if (settled_) return false;
  if (!sample_started_) {
    // The first cycle after a change only starts the clock.
    sample_started_ = true;
    sample_start_ = now;
    cycles_ = 0;
    bytes_ = 0;
    return false;
  }
  bytes_ += bytes;
  if (++cycles_ < config_.cycles_per_sample) return false;
  const double seconds = std::chrono::duration<double>(now - sample_start_).count();
  if (samples_++ >= config_.warmup_samples) scores_.push_back(seconds > 0 ? bytes_ / seconds : 0);
  sample_start_ = now;
  cycles_ = 0;
  bytes_ = 0;
  if (static_cast<int>(scores_.size()) < config_.samples_per_trial) return false;

  FinishTrial();
  *next = current_;
  return true;
}

void Autotuner::FinishTrial() {
  Trial t{current_, Median(scores_)};
  done_.push_back(t);
  WriteCsv(t, "trial");
  scores_.clear();
  samples_ = 0;
  sample_started_ = false;

  if (queue_.empty()) {
    const Trial best = *std::max_element(done_.begin(), done_.end(), [](const Trial& a, const Trial& b) {
      return a.score < b.score;
    });
    if (stage_ == 0) {
      // Stage 1 varies the cycle time at the best threshold (skipping the
      // pair already measured).
      stage_ = 1;
      for (int64_t c : config_.cycle_times_us) {
        EngineParams p{best.params.fusion_threshold, c};
        if (!(p == best.params)) queue_.push_back(p);
      }
    }
    if (queue_.empty()) {
      settled_ = true;
      current_ = best.params;
      WriteCsv(best, "best");
      return;
    }
  }
  current_ = queue_.front();
  queue_.erase(queue_.begin());
}

std::string Autotuner::Summary() const {
  const Trial best = *std::max_element(done_.begin(), done_.end(), [](const Trial& a, const Trial& b) {
    return a.score < b.score;
  });
  char line[256];
  std::snprintf(line, sizeof(line),
                "autotune settled after %zu trials: fusion threshold %.1f MB, cycle time %.2f ms "
                "(%.1f MB/s measured)",
                done_.size(), current_.fusion_threshold / 1048576.0, current_.cycle_time_us / 1000.0,
                best.score / 1e6);
  return line;
}

}  // namespace tf_ring
