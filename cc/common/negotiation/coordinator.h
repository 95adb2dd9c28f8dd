// Rank 0's bookkeeping: which ranks asked for which tensor, and, once all
// have, the checked response. Pure logic, no MPI, so it is unit tested alone.
#ifndef TF_RING_COMMON_COORDINATOR_H_
#define TF_RING_COMMON_COORDINATOR_H_

#include <chrono>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/base/message.h"

namespace tf_ring {

// "rank 3" or "ranks 0, 2", for the coordinator's error messages.
std::string RankList(const std::vector<int>& ranks);

struct StalledTensor {
  std::string name;
  std::vector<int> ready_ranks;
  std::vector<int> missing_ranks;
  double waited_seconds = 0;
};

class Coordinator {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Coordinator(int size) : size_(size), joined_(size, false) {}

  // Records one request. A rank that asks twice for a name still pending
  // turns that name into an error response. A join request marks its rank
  // as joined: from then on tensors are ready without it, and once every
  // rank has joined, TakeReady ends with one join response.
  void Add(const Request& request, Clock::time_point now = Clock::now());

  // Responses for every name all ranks have asked for, in the order the
  // names became ready; each one is checked for agreement across ranks.
  std::vector<Response> TakeReady();

  // Names some but not all ranks have asked for, pending longer than `after`.
  std::vector<StalledTensor> Stalled(std::chrono::duration<double> after,
                                     Clock::time_point now = Clock::now()) const;

  // Drops pending names and fails them with `reason` (used when a stall
  // becomes an error). Returns one error response per dropped name.
  std::vector<Response> FailPending(const std::vector<std::string>& names,
                                    const std::string& reason);

  // A rank that reported a local failure (Request::local_error, recorded
  // by Add) may have left its step: what the ranks still wait on
  // kFailureGrace after the report (names pending by then) will likely never
  // be ready, so each gets an error response naming the failure. Names that
  // become ready in the grace (the failed rank carried on) run as usual.
  std::vector<Response> TakeFailedByReports(Clock::time_point now = Clock::now());
  static constexpr std::chrono::milliseconds kFailureGrace{2000};

  // Blocking calls (Request::blocks, XLA) that can never finish: rank(s) R
  // wait in A, which S have not reached, while S wait in B, which R have not
  // reached (a tf.cond whose predicate differs by rank, and whose branches
  // run collectives in different orders). After `after`, error responses
  // for both, naming the tensors and the ranks.
  std::vector<Response> TakeCrossedWaits(std::chrono::duration<double> after,
                                         Clock::time_point now = Clock::now());

  bool empty() const { return table_.empty(); }
  // Some rank has joined and the join has not completed.
  bool joined_mode() const { return joined_count_ > 0; }

 private:
  struct Pending {
    std::vector<Request> by_rank;  // slot r holds rank r's request
    std::vector<bool> present;
    int count = 0;
    Clock::time_point first_seen;
    Clock::time_point stall_since;  // earliest submission on any rank, for the inspector
    std::string duplicate_error;
    bool queued = false;  // already in ready_order_
    std::vector<int> arrival_order;
    std::vector<Clock::time_point> arrived_at;  // parallel to arrival_order
  };

  // Every rank has either submitted the tensor or joined.
  bool IsReady(const Pending& p) const;
  void Join(const Request& request);

  struct Failure {
    int rank;
    std::string reason;
    Clock::time_point at;
  };

  int size_;
  std::vector<Failure> failures_;
  std::unordered_map<std::string, Pending> table_;
  std::vector<std::string> ready_order_;
  std::vector<bool> joined_;
  int joined_count_ = 0;
  int last_joined_ = -1;
  std::string join_name_;
};

// Checks that all ranks' requests for one name agree and builds the response
// (or an error response naming what differs on which ranks).
Response BuildResponse(const std::vector<Request>& by_rank, int size);
// The same when only the ranks marked `present` submitted (the others have
// joined): fills the joined-mode fields of the response, or fails the
// collectives that cannot run without every rank's data.
Response BuildResponse(const std::vector<Request>& by_rank, const std::vector<bool>& present,
                       int size);

}  // namespace tf_ring

#endif  // TF_RING_COMMON_COORDINATOR_H_
