// Which chunk a large allreduce inside one host stages, decided per
// allreduce by measuring how fast a cache line moves between the local
// ranks' cores. Small chunks win where the cores share a cache (what is
// staged is still in it when a peer reads it); where they do not, the line
// a rank stages again two chunks later may still sit in its peer's cache,
// and each such line crosses between the caches twice, which made 1 MiB
// chunks 2-5x slower than 4 MiB ones on the development VM
// (benchmarks/README.md, 'Chunks that do not bounce'); there, reading the
// peers' tensors directly beats staging at all (SingleCopyMode). So the
// measurement answers shared, apart or unknown, and is made each time
// because a VM's vCPUs and the scheduler's choice of cores move while a
// job runs.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

#include "common/observability/logging.h"
#include "common/transport/cpu_placement.h"
#include "common/transport/shm_segment.h"

namespace tf_ring {

namespace {
using Clock = std::chrono::steady_clock;

// Rank 0 pings each peer: two rounds to meet, then batches of round trips;
// the fastest clean batch's mean is the measurement. A batch with a round
// slower than kSlowRound is not clean: the peer lost its core meanwhile
// (TensorFlow's pool threads spin on a small host). Such rounds are still
// waited out, as the allreduce would wait for that peer anyway, and more
// batches follow, up to kMaxBatches. Meeting takes two rounds because
// whichever side came first may be asleep in its wait when the first round
// trip ends; the second one ends with both awake.
constexpr int kMeetRounds = 2;
constexpr int kCleanBatches = 4;
constexpr int kMaxBatches = 8;
constexpr int kRoundsPerBatch = 4;
// The development VM's fastest clean batches read 80-150 ns a round trip
// where the cores share an L3 and 420-540 ns on two chiplets, nothing
// between. Under the first line: shared; over the second: apart; between,
// neither answer is sure.
constexpr double kSharedCacheRoundTripNs = 220;
constexpr double kApartRoundTripNs = 300;
constexpr std::chrono::microseconds kSlowRound{50};
// The probe word's values: epoch << 16, plus (peer << 6) + round + 1 for a
// ping, plus kFinal + the answer for the answer, which exceeds them all.
constexpr uint64_t kFinal = 0xFFF0;
constexpr int kMaxRanks = 1000;  // (peer << 6) + rounds stays below kFinal
constexpr int kRounds = kMeetRounds + kMaxBatches * kRoundsPerBatch;
static_assert(kRounds < 64, "a peer's rounds fit in 6 bits");

// Tests only: "1" makes rank 0 answer shared, "0" apart, whatever it
// measured, so every path can be exercised on any machine.
int ForcedAnswer() {
  const char* value = std::getenv("TF_RING_TEST_SHM_SHARED_CACHE");
  if (value == nullptr || (value[0] != '0' && value[0] != '1')) return -1;
  return value[0] == '1' ? 1 : 2;  // ShmSegment::kCacheShared : kCacheApart
}
}  // namespace

void ShmSegment::AllowSharedCacheChunks(MPI_Comm local_comm, size_t bytes) {
  // With more local ranks than CPUs a ping waits for a time slice: the
  // measurement would say nothing, so such hosts keep the whole area. Every
  // input here is the same on every local rank, so is the choice: all must
  // take part in every measurement. Bound one to a core each or all free
  // to roam, the ranks are oversubscribed only where the CPUs they may use
  // are fewer than they are.
  const LocalCpus local_cpus = GatherLocalCpus(local_comm);
  const int cpus = local_cpus.count;
  const bool able = bytes > 0 && bytes < area_bytes_ && size_ > 1 && size_ <= kMaxRanks && size_ <= cpus;
  std::string why;
  cpu_home_ = ChooseCpuHome(local_cpus, rank_, size_, &why);
  if (LogEnabled(LogLevel::kInfo)) {
    Log(LogLevel::kInfo, "large shared-memory allreduces keep the engine thread on: " +
                             (cpu_home_.cpu >= 0 ? why : "no CPU in particular (" + why + ")"));
  }
  shared_cache_chunk_bytes_ = able ? bytes : 0;
  forced_answer_ = ForcedAnswer();  // read once here, not on every large allreduce
}

size_t ShmSegment::ChunkBytesFor(int64_t total_bytes, bool* cores_apart) {
  if (cores_apart != nullptr) *cores_apart = false;
  // One area or less is one chunk either way: nothing is staged twice.
  if (shared_cache_chunk_bytes_ == 0 || total_bytes <= static_cast<int64_t>(area_bytes_)) return area_bytes_;
  ++probe_epoch_;
  const int answer = rank_ == 0 ? LeadCacheProbe() : FollowCacheProbe();
  if (answer < 0) return 0;
  if (cores_apart != nullptr) *cores_apart = answer == kCacheApart;
  if (answer != kCacheShared) return area_bytes_;
  ++shared_cache_runs_;
  return shared_cache_chunk_bytes_;
}

int ShmSegment::LeadCacheProbe() {
  const uint64_t base = probe_epoch_ << 16;
  std::atomic<uint64_t>* mine = probe_word(0);
  double slowest_ns = 0;  // the slowest peer's fastest clean batch
  bool measured = true;
  for (int q = 1; q < size_ && measured; ++q) {
    std::atomic<uint64_t>* theirs = probe_word(q);
    int round = 0;
    auto send = [&]() {
      const uint64_t ping = base + (static_cast<uint64_t>(q) << 6) + (++round);
      PublishWord(mine, ping);
      return ping;
    };
    // The peer may not have reached this allreduce yet: wait as a barrier does.
    for (int i = 0; i < kMeetRounds && measured; ++i) measured = WaitForPeer(q, theirs, send());
    double best = -1;
    for (int batch = 0, clean = 0; measured && batch < kMaxBatches && clean < kCleanBatches; ++batch) {
      bool slow = false;
      const Clock::time_point start = Clock::now();
      for (int i = 0; i < kRoundsPerBatch && measured; ++i) {
        const Clock::time_point sent = Clock::now();
        const uint64_t ping = send();
        // The clock is read rarely while polling: each read would delay seeing the echo.
        for (int polls = 1; theirs->load(std::memory_order_acquire) < ping; ++polls) {
          if (polls % 256 == 0 && Clock::now() - sent > kSlowRound) {
            slow = true;
            measured = WaitForPeer(q, theirs, ping);  // false: the peer died
            break;
          }
        }
      }
      if (!measured || slow) continue;
      const double mean =
          std::chrono::duration<double, std::nano>(Clock::now() - start).count() / kRoundsPerBatch;
      best = best < 0 ? mean : std::min(best, mean);
      ++clean;
    }
    if (best < 0) measured = false;  // no clean batch: say nothing
    slowest_ns = std::max(slowest_ns, best);
  }
  int answer = !measured                               ? kCacheUnknown
               : slowest_ns < kSharedCacheRoundTripNs ? kCacheShared
               : slowest_ns > kApartRoundTripNs       ? kCacheApart
                                                      : kCacheUnknown;
  if (forced_answer_ >= 0) answer = forced_answer_;
  PublishWord(mine, base + kFinal + static_cast<uint64_t>(answer));
  return answer;
}

int ShmSegment::FollowCacheProbe() {
  const uint64_t base = probe_epoch_ << 16;
  std::atomic<uint64_t>* leader = probe_word(0);
  for (int round = 0;; ++round) {
    // Rank 0 may answer before all rounds (a slow one): the answer exceeds any ping.
    const uint64_t ping = round < kRounds ? base + (static_cast<uint64_t>(rank_) << 6) + round + 1 : base + kFinal;
    if (!WaitForPeer(0, leader, ping)) return -1;
    const uint64_t seen = leader->load(std::memory_order_acquire);
    if (seen >= base + kFinal) return static_cast<int>(seen - base - kFinal);
    PublishWord(probe_word(rank_), seen);  // the echo
  }
}

}  // namespace tf_ring
