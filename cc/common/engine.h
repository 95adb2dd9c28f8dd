// The process-wide engine: owns MPI, the background thread and the queue.
// Framework adapters call Enqueue from any thread; everything else happens
// on the background thread, one negotiation cycle at a time.
#ifndef TF_RING_COMMON_ENGINE_H_
#define TF_RING_COMMON_ENGINE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/observability/autotune.h"
#include "common/base/message.h"
#include "common/observability/stats.h"
#include "common/base/status.h"
#include "common/base/tensor_entry.h"
#include "common/observability/timeline.h"

namespace tf_ring {

struct Topology {
  int rank = -1, size = -1;
  int local_rank = -1, local_size = -1;
  int cross_rank = -1, cross_size = -1;
  bool homogeneous = true;  // every node runs the same number of ranks
};

class Engine {
 public:
  static Engine& Get();

  // `mpi_comm` points at an MPI_Comm to duplicate, or is null for COMM_WORLD.
  // A second call while running is a no-op.
  Status Init(const void* mpi_comm);
  // Stops every rank's engine after the current cycle; pending ops fail.
  void Shutdown();
  // True while the engine accepts collectives (false once any rank's
  // shutdown, or a stall error, stopped it).
  bool running() { return running_.load() && accepting(); }
  // True from init() until this process's own shutdown(): the topology
  // stays readable after another rank stopped the engine.
  bool started() const { return running_.load(); }
  // Fails with a clear message when not running or when the name is in
  // flight. `process_set` 0 is the global set (every rank).
  Status Enqueue(TensorEntry entry, Request request, int32_t process_set = 0);
  // Enqueues several collectives atomically (grouped allreduce).
  Status EnqueueGroup(std::vector<TensorEntry> entries, std::vector<Request> requests,
                      int32_t process_set = 0);

  // Process sets (engine_process_sets.cc). Adding and removing are
  // collective: every rank calls with the same change and blocks until the
  // background thread applied it; `ids` gets the new sets' ids.
  Status AddProcessSets(const std::vector<std::vector<int>>& sets, std::vector<int32_t>* ids);
  // Adds sets under the given ids (in-process recovery); later sets get
  // `next_id` or more.
  Status RestoreProcessSets(const std::vector<std::vector<int>>& sets,
                            const std::vector<int32_t>& at_ids, int32_t next_id);
  Status RemoveProcessSet(int32_t id);
  // Ranks of set `id` (0: all); false when there is no such set.
  bool ProcessSetRanks(int32_t id, std::vector<int>* ranks);
  std::vector<int32_t> ProcessSetIds();  // besides 0, ascending
  // Counters of set `id` (0: the global set); false when there is none.
  bool ProcessSetStats(int32_t id, int64_t out[kStatCount]);
  // Counts an op of set `id` that its caller finished inline (negotiation/caller_wait.h).
  void CountCallerFinished(int32_t id);

  // Rank 0 writes the timeline; elsewhere these are no-ops. Stops with the engine.
  Status StartTimeline(const std::string& path, bool mark_cycles);
  void StopTimeline();

  // Engine parameters now in force, and every change with the cycle it took
  // effect at (the same cycle on every rank).
  struct ParamChange {
    int64_t cycle;
    EngineParams params;
  };
  enum class AutotuneState { kOff = 0, kTuning = 1, kSettled = 2 };
  EngineParams params();
  // Rank 0's settings, which every rank runs with (agreed_settings.h):
  // "NAME=value" per variable rank 0 set, "NAME" per one it left unset,
  // NUL-separated.
  std::string agreed_settings();
  AutotuneState autotune_state();
  std::vector<ParamChange> param_history();

  // True when another rank stopped the engine while this rank still had
  // collectives pending: that rank left the job early (see python/lifecycle.cc, FinalizeMpi).
  bool failed_by_peer() const { return failed_by_peer_.load(); }

  Topology topology() const { return topology_; }
  // How long a caller may wait inline for a small op (negotiation/caller_wait.h); 0: not at all.
  int64_t caller_wait_us() const { return caller_wait_us_.load(std::memory_order_relaxed); }
  const EngineStats& stats() const { return stats_; }
  void ResetStats();

 private:
  Engine() = default;
  struct Impl;
  void Loop();
  // Switches to the parameters a negotiation carried (autotune).
  void ApplyParams(const ResponseList& agreed);
  bool accepting();
  // Runs one process set change through the global set (see process_set_change.h).
  Status ChangeProcessSets(const std::vector<int64_t>& ask, std::vector<int32_t>* ids);
  // Shutdown's work; caller holds lifecycle_mu_.
  void StopLocked();
  // Why Enqueue refuses work (caller holds accept_mu_).
  Status NotAccepting() const;

  std::mutex lifecycle_mu_;  // serializes Init/Shutdown
  std::mutex accept_mu_;     // makes "accepting" and "enqueued" one step
  bool accepting_ = false;
  bool was_shut_down_ = false;  // picks the right error text in Enqueue
  std::string stop_reason_;     // why the loop stopped: the error, or who shut it down
  std::atomic<bool> running_{false};
  std::atomic<bool> shutdown_requested_{false};
  std::atomic<bool> failed_by_peer_{false};
  std::atomic<int64_t> caller_wait_us_{0};
  std::thread thread_;
  std::unique_ptr<Impl> impl_;
  Topology topology_;
  EngineStats stats_;
  Timeline timeline_;
  std::mutex params_mu_;  // guards the four below (read from Python threads)
  EngineParams params_;
  std::string settings_text_;
  AutotuneState autotune_state_ = AutotuneState::kOff;
  std::vector<ParamChange> param_history_;
};

}  // namespace tf_ring

#endif  // TF_RING_COMMON_ENGINE_H_
