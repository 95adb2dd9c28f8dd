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
  // becomes an error). Returns one error response per dropped name, for
  // the ranks that submitted it; a rank that submits it later gets the same
  // error at once (see TakeDecidedFailures).
  std::vector<Response> FailPending(const std::vector<std::string>& names,
                                    const std::string& reason);

  // Errors decided while adding requests, for this cycle's response list:
  // a rank that submitted a name which had failed before it came (it gets
  // the same error, alone), and the runs a rank's refusal leaves without a
  // partner (Request::local_error: the refused run's match on the others).
  std::vector<Response> TakeDecidedFailures();

  // Ranks waiting crosswise for longer than `after`: ranks R wait in A,
  // which S did not reach, while S wait in B, which R did not reach, and A
  // or B blocks its caller (XLA) or is an iteration of a graph loop. Such
  // waits never finish (a tf.cond whose predicate differs by rank, a loop
  // run a different number of times): error responses for every name in
  // such a cross, naming the tensors and the ranks, and for what the same
  // ranks submitted before and still wait in.
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

  // A name that failed, or whose run a rank refused, kept (with its error)
  // so that a rank that submits it later gets that error at once rather
  // than waiting for ranks that are gone (coordinator_failures.cc).
  struct FailedName {
    std::string error;
    OpType op = OpType::kAllreduce;
    DataType dtype = DataType::kFloat32;
    std::vector<bool> owed;      // ranks that get `error` when they submit the name
    std::vector<bool> refusers;  // ranks that refused a run of it: their next run ends this
    bool armed = true;           // false while a refuser's earlier run of it still waits
  };
  static constexpr size_t kFailedNamesKept = 1024;
  // Ranks found out of step, and when: what they submitted before then and
  // still wait in fails too (TakeCrossedWaits).
  struct OutOfStep {
    std::vector<bool> ranks;
    Clock::time_point at;
    std::string why;
  };

  // Drops one pending name; its error response goes to the ranks that
  // submitted it. Missing ranks not `elsewhere` (waiting in another failed
  // name) are owed the error when they submit it later.
  Response FailOne(const std::string& name, const std::string& error,
                   const std::vector<bool>& elsewhere);
  // In Add: true when `request` was owed a failed name's error (now decided).
  bool DeliverIfOwed(const Request& request);
  void Refused(const Request& report);
  void Remember(const std::string& name, FailedName failed);
  void Forget(const std::string& name);
  // A run of `name` finished (or failed): a refusal waiting for it applies
  // from now on, and the response stays out of the cache.
  void AfterRun(const std::string& name, Response* resp);
  std::vector<Response> FailStragglers(std::chrono::duration<double> after, Clock::time_point now);

  int size_;
  std::unordered_map<std::string, FailedName> failed_;
  std::vector<std::string> failed_order_;  // oldest first, for kFailedNamesKept
  std::vector<Response> decided_;
  std::vector<OutOfStep> out_of_step_;
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
