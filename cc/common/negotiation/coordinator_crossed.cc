// Crossed waits: ranks R wait in a collective that ranks S did not reach,
// while S wait in one R did not reach. Where one of the two blocks its
// caller (an XLA custom call) or is an iteration of a graph loop, the ranks
// took different paths (a rank-dependent tf.cond under XLA, a loop run a
// different number of times, collectives that differ by rank in a loop),
// and neither will ever finish: both fail on every rank, naming the tensors
// and the ranks. Plain graph collectives crossing are left to the stall
// check: another thread may still submit them.
#include <algorithm>

#include "common/negotiation/coordinator.h"

namespace tf_ring {

namespace {

struct Waits {
  std::string name;
  OpType op = OpType::kAllreduce;
  std::vector<int> present, missing;
  bool blocks = false, in_loop = false;
};

bool Overlap(const std::vector<int>& a, const std::vector<int>& b) {
  for (int x : a) {
    if (std::find(b.begin(), b.end(), x) != b.end()) return true;
  }
  return false;
}

bool Crossed(const Waits& a, const Waits& b) {
  return (a.blocks || a.in_loop || b.blocks || b.in_loop) && Overlap(a.present, b.missing) &&
         Overlap(b.present, a.missing);
}

// "rank 1 waits" / "ranks 1, 2 wait"
std::string Wait(const std::vector<int>& ranks) {
  return RankList(ranks) + (ranks.size() == 1 ? " waits" : " wait");
}

// The name NameInLoop gave a loop's iteration: "<base>/iter<i>@<frame>".
bool SplitLoopName(const std::string& name, std::string* base, std::string* iteration) {
  const size_t at = name.rfind("/iter");
  if (at == std::string::npos) return false;
  const size_t frame = name.find('@', at);
  if (frame == std::string::npos || frame == at + 5) return false;
  *base = name.substr(0, at);
  *iteration = name.substr(at + 5, frame - at - 5);
  return true;
}

std::string Where(const Waits& w) {
  std::string base, iteration;
  if (w.in_loop && SplitLoopName(w.name, &base, &iteration)) {
    return " (iteration " + iteration + " of the loop around '" + base + "')";
  }
  return std::string();
}

std::string Why(const Waits& a, const Waits& b) {
  const std::string both = Wait(a.present) + " in tensor '" + a.name + "'" + Where(a) + ", which " +
                           RankList(a.missing) + " did not reach, while " + Wait(b.present) +
                           " in tensor '" + b.name + "'" + Where(b) + ", which " +
                           RankList(b.missing) + " did not reach";
  if (!a.in_loop && !b.in_loop) {
    return "collectives inside jit_compile (XLA) reached the ranks in different orders: " + both +
           ". Each compiled call waits for every rank, so the order must be the same everywhere: "
           "a tf.cond (or loop) whose predicate differs by rank must run the same collectives in "
           "the same order in every branch; or compute the predicate the same on every rank "
           "(reduce first, then decide).";
  }
  std::string base_a, base_b, iteration;
  const bool one_loop = !a.in_loop || !b.in_loop ||
                        (SplitLoopName(a.name, &base_a, &iteration) &&
                         SplitLoopName(b.name, &base_b, &iteration) && base_a == base_b);
  return std::string(one_loop ? "the ranks ran a loop a different number of times: "
                              : "the ranks run different collectives in a loop (or ran it a "
                                "different number of times): ") +
         both + ". Every rank must run a loop that holds collectives the same number of times, "
                "with the same collectives in it: compute its trip count (and any predicate "
                "inside it) the same on every rank (reduce first, then decide).";
}

}  // namespace

std::vector<Response> Coordinator::TakeCrossedWaits(std::chrono::duration<double> after,
                                                    Clock::time_point now) {
  std::vector<Response> out;
  std::vector<Waits> old;
  for (StalledTensor& t : Stalled(after, now)) {
    Waits w;
    w.name = std::move(t.name);
    w.present = std::move(t.ready_ranks);
    w.missing = std::move(t.missing_ranks);
    const Pending& p = table_.at(w.name);
    for (int r : w.present) {
      w.op = p.by_rank[r].op;
      w.blocks = w.blocks || p.by_rank[r].blocks;
      w.in_loop = w.in_loop || p.by_rank[r].in_loop;
    }
    old.push_back(std::move(w));
  }
  // Every name in some cross fails; the first cross found explains them all.
  std::vector<bool> crossed(old.size(), false);
  std::string why;
  for (size_t i = 0; i < old.size(); ++i) {
    for (size_t j = i + 1; j < old.size(); ++j) {
      if (!Crossed(old[i], old[j])) continue;
      crossed[i] = crossed[j] = true;
      if (why.empty()) why = Why(old[i], old[j]);
    }
  }
  if (why.empty()) return FailStragglers(after, now);
  // A rank waiting in one failed name is elsewhere for the others: it is
  // owed none of their errors. A rank in none of them is merely behind.
  OutOfStep step{std::vector<bool>(size_, false), now, why};
  for (size_t i = 0; i < old.size(); ++i) {
    for (int r : old[i].present) step.ranks[r] = step.ranks[r] || crossed[i];
  }
  for (size_t i = 0; i < old.size(); ++i) {
    if (!crossed[i]) continue;
    out.push_back(FailOne(old[i].name, std::string(OpTypeName(old[i].op)) + " of tensor '" +
                                           old[i].name + "' cannot finish: " + why,
                          step.ranks));
  }
  out_of_step_.push_back(std::move(step));
  for (Response& r : FailStragglers(after, now)) out.push_back(std::move(r));
  return out;
}

std::vector<Response> Coordinator::FailStragglers(std::chrono::duration<double> after,
                                                  Clock::time_point now) {
  // A name those ranks submitted before they were found out of step, and
  // still wait in for one another, is of the step they left (another
  // collective of the same loop iteration, one still on its way here as a
  // cache hit, which comes within `after`): it fails with them.
  std::vector<Response> out;
  const auto expired = [&](const OutOfStep& s) { return now - s.at > after * 2; };
  out_of_step_.erase(std::remove_if(out_of_step_.begin(), out_of_step_.end(), expired),
                     out_of_step_.end());
  for (const OutOfStep& s : out_of_step_) {
    std::vector<std::string> left;
    for (const auto& kv : table_) {
      const Pending& p = kv.second;
      if (p.queued || p.stall_since > s.at) continue;
      bool inside = true, waits_for_one = false;
      for (int r = 0; r < size_; ++r) {
        if (p.present[r]) inside = inside && s.ranks[r];
        if (!p.present[r] && !joined_[r] && s.ranks[r]) waits_for_one = true;
      }
      if (inside && waits_for_one) left.push_back(kv.first);
    }
    for (const std::string& name : left) {
      const Pending& p = table_[name];
      OpType op = OpType::kAllreduce;
      for (int r = 0; r < size_; ++r) {
        if (p.present[r]) op = p.by_rank[r].op;
      }
      out.push_back(FailOne(name, std::string(OpTypeName(op)) + " of tensor '" + name +
                                      "' was in flight when the ranks went out of step, so it "
                                      "fails with them: " + s.why,
                            s.ranks));
    }
  }
  return out;
}

}  // namespace tf_ring
