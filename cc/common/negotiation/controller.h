// One engine cycle's agreement across ranks.
//
// Requests that hit every rank's response cache are agreed with a single
// bitwise-AND allreduce. Everything else (misses, invalidated entries,
// shutdown) goes through rank 0: every rank's RequestList is gathered, the
// Coordinator answers, and one ResponseList is broadcast.
#ifndef TF_RING_COMMON_CONTROLLER_H_
#define TF_RING_COMMON_CONTROLLER_H_

#include <algorithm>
#include <chrono>
#include <unordered_map>

#include "common/observability/autotune.h"
#include "common/negotiation/coordinator.h"
#include "common/base/message.h"
#include "common/transport/mpi_context.h"
#include "common/transport/shm_segment.h"
#include "common/negotiation/response_cache.h"

namespace tf_ring {

struct StallConfig {
  double check_seconds = 60;    // warn about tensors some ranks lack; 0: never
  double shutdown_seconds = 0;  // turn such a stall into an error; 0: never
  double crossed_seconds = 5;   // fail crossed waits this old (see TakeCrossedWaits); 0: never
};

struct CycleCounts {
  int64_t negotiations = 0;
  int64_t cache_hits = 0;
  int64_t cache_misses = 0;
};

class Controller {
 public:
  Controller(const MpiContext* mpi, size_t cache_capacity, StallConfig stall)
      : mpi_(mpi), coordinator_(mpi->size()), cache_(cache_capacity), stall_(stall),
        demote_after_(DemoteAfter(stall)) {}

  // Adds this cycle's new requests and returns, in the same order on every
  // rank, the responses that are ready everywhere.
  // `busy_sets` (optional) carries 64 bits through the cycle's cache round:
  // this rank's in, the OR over every rank out; all ones when this cycle
  // had no cache round (cache off, joined mode), so callers stay safe.
  Status RunCycle(std::vector<Request> new_requests, bool shutdown, ResponseList* out,
                  CycleCounts* counts, uint64_t* busy_sets = nullptr);
  // Rank 0: sends new engine parameters to every rank in the next cycle
  // (forcing a negotiation); they arrive in that cycle's ResponseList.
  void ProposeParams(EngineParams params, bool settled) {
    proposal_ = params;
    proposal_settled_ = settled;
    has_proposal_ = true;
  }
  // Lets the response cache grow, up to `limit` entries, when the job
  // cycles through more names than it holds (0: never; it warns instead).
  void LetCacheGrowTo(size_t limit) { cache_limit_ = limit; }
  // Where `shm` holds every rank of the communicator (one host), the
  // cache round goes through it instead of MPI. Same choice on every rank.
  void RoundOverSharedMemory(ShmSegment* shm) { shm_round_ = shm; }
  // A process set's controller: stall reports name its ranks as engine
  // ranks (`ranks[i]` for set rank i) and start with `scope`.
  void DescribeRanksAs(std::vector<int> ranks, std::string scope) {
    rank_labels_ = std::move(ranks);
    scope_ = std::move(scope);
  }

 private:
  // Rank 0 round trip for `to_send`; fills `out` with the agreed responses.
  Status Negotiate(const RequestList& to_send, ResponseList* out);
  ResponseList Coordinate(const std::vector<RequestList>& all);
  // Rank 0: warns about (and, past the limit, fails) tensors some ranks lack.
  void InspectStalls(ResponseList* out);
  // The cache thrashes: grow it (the same on every rank), or warn once.
  void AdaptCache();

  const MpiContext* mpi_;
  ShmSegment* shm_round_ = nullptr;
  Coordinator coordinator_;
  ResponseCache cache_;
  size_t cache_limit_ = 0;
  bool cache_warned_ = false;
  StallConfig stall_;
  // A cache hit that other ranks leave waiting is demoted to a full request,
  // so rank 0's stall inspector can see who is missing it. The request says
  // how long it already waited, so demoting at half the inspector's shortest
  // period still warns on time, and a rank that merely lags costs no
  // negotiation. By the crossed-wait time at the latest, so that ranks
  // waiting crosswise are seen. Without either check, never.
  static std::chrono::duration<double> DemoteAfter(const StallConfig& stall) {
    double period = 0;
    for (double p : {stall.check_seconds, stall.shutdown_seconds}) {
      if (p > 0 && (period == 0 || p < period)) period = p;
    }
    double after = period > 0 ? period / 2 : 1e9;
    if (stall.crossed_seconds > 0) after = std::min(after, stall.crossed_seconds);
    return std::chrono::duration<double>(after);
  }
  const std::chrono::duration<double> demote_after_;
  std::vector<Request> waiting_;  // cache hits not yet ready on every rank
  std::vector<Coordinator::Clock::time_point> waiting_since_;  // parallel to waiting_
  std::unordered_map<std::string, Coordinator::Clock::time_point> last_warned_;
  Coordinator::Clock::time_point last_negotiation_;
  std::unordered_map<std::string, Request> negotiating_;  // sent to rank 0, by name
  bool joined_mode_ = false;
  bool has_proposal_ = false, proposal_settled_ = false;
  EngineParams proposal_;  // from the last negotiation: identical on every rank
  std::vector<int> rank_labels_;  // empty: ranks are engine ranks
  std::string scope_;
  // Rank 0: arrival facts of responses in flight through serialization.
  std::unordered_map<std::string, std::pair<std::vector<int>, std::vector<int>>> arrivals_;
};

}  // namespace tf_ring

#endif  // TF_RING_COMMON_CONTROLLER_H_
