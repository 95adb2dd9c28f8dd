// Unit tests of the coordinator's answers to ranks out of step: a rank's
// refusal fails only the run that cannot pair, a failed name reaches a rank
// that submits it later, and crossed waits (XLA calls, loop iterations)
// fail together while plain late ranks do not. Built with g++ alone by
// tests/builds/test_engine_unit.py.
#include <chrono>
#include <cstdio>
#include <string>

#include "common/negotiation/coordinator.h"
#include "unit_check.h"

using namespace tf_ring;

using Clock = Coordinator::Clock;
static const std::chrono::seconds kAfter(5);

static Request Make(int rank, const std::string& name, bool in_loop = false, bool blocks = false) {
  Request r;
  r.rank = rank;
  r.name = name;
  r.shape = {1};
  r.in_loop = in_loop;
  r.blocks = blocks;
  return r;
}

static Request Refusal(int rank, const std::string& name) {
  Request r = Make(rank, name);
  r.local_error = "allreduce of tensor '" + name + "': already in flight on this rank";
  return r;
}

// The report: rank 0's second run of "dup" is refused while its first
// waits; rank 1's one run pairs with that first; later names are untouched.
static void TestRefusalFailsNothingTheRankCanStillRun() {
  Coordinator c(2);
  auto t0 = Clock::now();
  c.Add(Make(0, "dup"), t0);
  c.Add(Refusal(0, "dup"), t0);
  CHECK(c.TakeDecidedFailures().empty());
  c.Add(Make(0, "next"), t0);
  c.Add(Make(1, "dup"), t0 + std::chrono::seconds(1));
  std::vector<Response> ran = c.TakeReady();
  CHECK(ran.size() == 1 && !ran[0].is_error() && ran[0].uncached);
  // "next" waits 3 s for the late rank, and nothing fails it.
  CHECK(c.TakeCrossedWaits(kAfter, t0 + std::chrono::seconds(3)).empty());
  CHECK(c.TakeDecidedFailures().empty());
  c.Add(Make(1, "next"), t0 + std::chrono::seconds(3));
  ran = c.TakeReady();
  CHECK(ran.size() == 1 && ran[0].names[0] == "next" && !ran[0].is_error());
  // A second run of "dup" on rank 1 would pair with the refused one: it fails
  // at once, for rank 1 alone, naming rank 0's refusal.
  c.Add(Make(1, "dup"), t0 + std::chrono::seconds(4));
  std::vector<Response> failed = c.TakeDecidedFailures();
  CHECK(failed.size() == 1 && (failed[0].only_ranks == std::vector<int32_t>{1}));
  CHECK(failed.size() == 1 && Contains(failed[0].error, "rank 0 refused allreduce of tensor 'dup'") &&
        Contains(failed[0].error, "already in flight"));
  CHECK(c.empty());
  // Owed once: the next run of "dup" pairs as usual.
  c.Add(Make(1, "dup"));
  c.Add(Make(0, "dup"));
  ran = c.TakeReady();
  CHECK(ran.size() == 1 && !ran[0].is_error() && !ran[0].uncached);
}

// The refusing rank's run already finished; the others wait in the refused one.
static void TestRefusalFailsTheRunWaitingForIt() {
  Coordinator c(3);
  c.Add(Make(1, "x"));
  c.Add(Make(2, "x"));
  c.Add(Refusal(0, "x"));
  std::vector<Response> failed = c.TakeDecidedFailures();
  CHECK(failed.size() == 1 && (failed[0].only_ranks == std::vector<int32_t>{1, 2}));
  CHECK(c.TakeReady().empty() && c.empty());
  // No one is owed it any more: the next runs pair.
  for (int r : {0, 1, 2}) c.Add(Make(r, "x"));
  CHECK(c.TakeReady().size() == 1 && c.TakeDecidedFailures().empty());
}

// The refusing rank runs the name again before the others sent a second
// run: its refused run is behind it, and the runs pair as usual.
static void TestRefusingRankRunningAgainEndsTheRefusal() {
  Coordinator c(2);
  c.Add(Refusal(0, "y"));
  c.Add(Make(0, "y"));
  c.Add(Make(1, "y"));
  CHECK(c.TakeDecidedFailures().empty());
  std::vector<Response> ran = c.TakeReady();
  CHECK(ran.size() == 1 && !ran[0].is_error());
  // Every rank refused its second run: none has a run to pair, none is owed.
  c.Add(Refusal(0, "z"));
  c.Add(Refusal(1, "z"));
  c.Add(Make(1, "z"));
  c.Add(Make(0, "z"));
  CHECK(c.TakeDecidedFailures().empty() && c.TakeReady().size() == 1);
}

// XLA calls blocked crosswise fail together; one rank merely late does not.
static void TestCrossedBlockingCalls() {
  Coordinator c(2);
  auto t0 = Clock::now();
  c.Add(Make(0, "a", false, true), t0);
  c.Add(Make(1, "b", false, true), t0);
  CHECK(c.TakeCrossedWaits(kAfter, t0 + std::chrono::seconds(2)).empty());  // two threads may finish
  std::vector<Response> failed = c.TakeCrossedWaits(kAfter, t0 + std::chrono::seconds(6));
  CHECK(failed.size() == 2 && c.empty());
  for (const auto& r : failed) {
    CHECK(Contains(r.error, "different orders") && Contains(r.error, "rank 0 waits in tensor 'a'") &&
          Contains(r.error, "rank 1 waits in tensor 'b'"));
  }
  Coordinator late(2);
  late.Add(Make(0, "a", false, true), t0);
  CHECK(late.TakeCrossedWaits(kAfter, t0 + std::chrono::seconds(60)).empty());
  // Plain graph collectives crossing: another thread may still submit them.
  Coordinator plain(2);
  plain.Add(Make(1, "x"), t0);
  plain.Add(Make(0, "y"), t0);
  CHECK(plain.TakeCrossedWaits(kAfter, t0 + std::chrono::seconds(60)).empty());
}

// A loop run 3 times on rank 0 and twice on ranks 1 and 2, which went on to
// "after": all fail, saying so; what rank 0 sent in the same iteration, and
// is still on its way here, fails with them.
static void TestUnequalTripCounts() {
  Coordinator c(3);
  auto t0 = Clock::now();
  c.Add(Make(0, "c/iter2@00ab", true), t0);
  c.Add(Make(1, "after"), t0);
  c.Add(Make(2, "after"), t0);
  std::vector<Response> failed = c.TakeCrossedWaits(kAfter, t0 + std::chrono::seconds(6));
  CHECK(failed.size() == 2 && c.empty());
  for (const auto& r : failed) {
    CHECK(Contains(r.error, "a different number of times") &&
          Contains(r.error, "rank 0 waits in tensor 'c/iter2@00ab' (iteration 2 of the loop around 'c')") &&
          Contains(r.error, "ranks 1, 2 wait in tensor 'after'"));
  }
  CHECK(failed.size() == 2 && (failed[0].only_ranks.size() + failed[1].only_ranks.size() == 3));
  Request straggler = Make(0, "d/iter2@00ab", true);
  straggler.waited_us = 3000000;  // a cache hit submitted before the cross was found
  c.Add(straggler, t0 + std::chrono::seconds(7));
  failed = c.TakeCrossedWaits(kAfter, t0 + std::chrono::seconds(7));
  CHECK(failed.size() == 1 && Contains(failed[0].error, "in flight when the ranks went out of step"));
  // Nothing is owed: every rank was in one of the failed names.
  c.Add(Make(1, "c/iter2@00ab", true));
  CHECK(c.TakeDecidedFailures().empty() && !c.empty());
}

// Different collectives in one loop (really different programs), and a
// third rank that comes later: it gets the same error at once, alone.
static void TestDifferentCollectivesAndALateRank() {
  Coordinator c(3);
  auto t0 = Clock::now();
  c.Add(Make(0, "p/iter0@01", true), t0);
  c.Add(Make(1, "q/iter0@01", true), t0);
  std::vector<Response> failed = c.TakeCrossedWaits(kAfter, t0 + std::chrono::seconds(6));
  CHECK(failed.size() == 2 && Contains(failed[0].error, "run different collectives in a loop"));
  c.Add(Make(2, "q/iter0@01", true), t0 + std::chrono::seconds(8));
  std::vector<Response> late = c.TakeDecidedFailures();
  CHECK(late.size() == 1 && (late[0].only_ranks == std::vector<int32_t>{2}) &&
        Contains(late[0].error, "tensor 'q/iter0@01'") && c.empty());
}

int main() {
  TestRefusalFailsNothingTheRankCanStillRun();
  TestRefusalFailsTheRunWaitingForIt();
  TestRefusingRankRunningAgainEndsTheRefusal();
  TestCrossedBlockingCalls();
  TestUnequalTripCounts();
  TestDifferentCollectivesAndALateRank();
  return Summary();
}
