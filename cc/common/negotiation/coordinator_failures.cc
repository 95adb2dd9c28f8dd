// The coordinator's answers to ranks falling out of step: a rank's own
// refusal reported to the others, and XLA calls waiting crosswise. Kept apart
// from coordinator.cc, which matches requests into responses.
#include <algorithm>

#include "common/negotiation/coordinator.h"

namespace tf_ring {

std::vector<Response> Coordinator::TakeFailedByReports(Clock::time_point now) {
  std::vector<Response> out;
  auto expired = [&](const Failure& f) { return now - f.at >= kFailureGrace; };
  for (const Failure& f : failures_) {
    if (!expired(f)) continue;
    std::vector<std::string> names;
    for (const auto& kv : table_) {
      // Ready names run this cycle (TakeReady took them first); names that
      // came after the grace are new work, not the failed step's.
      if (!kv.second.queued && kv.second.first_seen <= f.at + kFailureGrace) names.push_back(kv.first);
    }
    for (Response& r : FailPending(names, f.reason)) out.push_back(std::move(r));
  }
  failures_.erase(std::remove_if(failures_.begin(), failures_.end(), expired), failures_.end());
  return out;
}

std::vector<Response> Coordinator::TakeCrossedWaits(std::chrono::duration<double> after,
                                                    Clock::time_point now) {
  struct Waits {
    std::string name;
    std::vector<int> blocked, missing;
  };
  std::vector<Waits> old;
  for (const auto& kv : table_) {
    const Pending& p = kv.second;
    if (p.queued || now - p.stall_since < after) continue;
    Waits w;
    w.name = kv.first;
    for (int r = 0; r < size_; ++r) {
      if (p.present[r] && p.by_rank[r].blocks) w.blocked.push_back(r);
      if (!p.present[r] && !joined_[r]) w.missing.push_back(r);
    }
    if (!w.blocked.empty()) old.push_back(std::move(w));
  }
  auto overlaps = [](const std::vector<int>& a, const std::vector<int>& b) {
    for (int x : a) {
      if (std::find(b.begin(), b.end(), x) != b.end()) return true;
    }
    return false;
  };
  std::vector<std::string> names;
  std::string reason;
  for (size_t i = 0; i < old.size() && reason.empty(); ++i) {
    for (size_t j = 0; j < old.size() && reason.empty(); ++j) {
      const Waits& a = old[i];
      const Waits& b = old[j];
      if (i == j || !overlaps(a.blocked, b.missing) || !overlaps(b.blocked, a.missing)) continue;
      reason = "collectives inside jit_compile (XLA) reached the ranks in different orders: " +
               RankList(a.blocked) + " wait in tensor '" + a.name + "', which " + RankList(a.missing) +
               " did not reach, while " + RankList(b.blocked) + " wait in tensor '" + b.name +
               "', which " + RankList(b.missing) + " did not reach. Each compiled call waits for " +
               "every rank, so the order must be the same everywhere: a tf.cond (or loop) whose " +
               "predicate differs by rank must run the same collectives in the same order in every " +
               "branch; or compute the predicate the same on every rank (reduce first, then decide).";
      names = {a.name, b.name};
    }
  }
  if (names.empty()) return {};
  return FailPending(names, reason);
}

}  // namespace tf_ring
