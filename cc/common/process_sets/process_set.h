// A process set: a subset of the engine's ranks that negotiates and runs its
// collectives on its own (its own communicator, queue, coordinator, response
// cache and fusion batches), so a stalled set never blocks another. The
// engine's one background thread runs each set's cycle; the global set (id
// 0) is the engine itself and never one of these.
#ifndef TF_RING_COMMON_PROCESS_SET_H_
#define TF_RING_COMMON_PROCESS_SET_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/negotiation/controller.h"
#include "common/transport/host_layout.h"
#include "common/transport/mpi_context.h"
#include "common/transport/shm_segment.h"
#include "common/operation_manager.h"
#include "common/observability/stats.h"
#include "common/base/status.h"
#include "common/negotiation/tensor_queue.h"

namespace tf_ring {

// What every set of an engine is built with (the engine's own settings).
struct ProcessSetOptions {
  size_t cache_capacity = 0;
  size_t cache_limit = 0;  // see Controller::LetCacheGrowTo
  // The set's coordinator warns about tensors some members lack (0: never),
  // and past stall_shutdown_seconds (0: never) fails them and stops the engine.
  double stall_check_seconds = 0;
  double stall_shutdown_seconds = 0;
  double crossed_wait_seconds = 0;  // see StallConfig::crossed_seconds
  // Shared-memory chunk per member, for sets whose members share one host
  // or go hierarchical (several members on each host, as many on every
  // host: TF_RING_HIERARCHICAL decides, as for the global set); 0: plain
  // MPI only, as with TF_RING_SHM=0. The smaller chunk is used where a
  // host's /dev/shm cannot hold the default (0: the chunk was set, no fallback).
  size_t shm_area_bytes = 0;
  size_t shm_fallback_bytes = 0;
  // The chunk staged where the local ranks' cores share a cache (0: always
  // the area; ShmSegment::AllowSharedCacheChunks).
  size_t shm_shared_cache_chunk_bytes = 0;
  HierarchicalMode hierarchical = HierarchicalMode::kAuto;
  SingleCopyMode shm_single_copy = SingleCopyMode::kNever;  // when large allreduces read peers' tensors directly
  // The engine's timeline (it records only where it was started, rank 0).
  Timeline* timeline = nullptr;

  // A coordinator-and-cache for `mpi` with these settings (the global set's
  // and every process set's alike).
  std::unique_ptr<Controller> MakeController(const MpiContext* mpi) const;
};

class ProcessSet {
 public:
  // `ranks`: ascending engine ranks; `my_rank` is this process's engine rank.
  ProcessSet(int32_t id, std::vector<int> ranks, int my_rank);
  ~ProcessSet();

  // Members only: builds the set's communicator from `world`, collectively
  // with the other members (every member calls it with the same id), and
  // its shared-memory segment when every member runs on one host or the set
  // goes hierarchical across hosts.
  Status Connect(MPI_Comm world, const ProcessSetOptions& options);

  int32_t id() const { return id_; }
  const std::vector<int>& ranks() const { return ranks_; }
  bool included() const { return set_rank_ >= 0; }
  int set_rank() const { return set_rank_; }
  int my_rank() const { return my_rank_; }
  // The set rank of engine rank `rank`, or -1 when it is not a member.
  int SetRankOf(int rank) const;
  // "1 (ranks 0, 2)", for error texts.
  std::string Describe() const;

  TensorQueue& queue() { return queue_; }
  EngineStats& stats() { return stats_; }
  // One negotiation cycle over the set's communicator and the collectives it
  // agreed on. Members only; every member runs it at the same engine cycle.
  // Returns the stall shutdown's reason when the set's coordinator turned a
  // stall into an error (the engine then stops on every rank), else "".
  std::string RunCycle(int64_t fusion_threshold);
  // This rank called join() on the set and waits for the other members: its
  // join entry does not make the engine loop spin.
  bool joined_here() const { return joined_here_; }
  // Frees the communicator (members, all together) and returns the entries
  // still pending, for the caller to fail.
  std::vector<TensorEntry> Close();
  // Whether this set is reducing through shared memory.
  bool uses_shm() const { return shm_.ready(); }
  // Whether its collectives run hierarchically across hosts.
  bool hierarchical() const { return hierarchical_; }

 private:
  const int32_t id_;
  const std::vector<int> ranks_;
  const int set_rank_;
  const int my_rank_;
  MpiContext mpi_;
  HostLayout hosts_;

  bool connected_ = false;
  bool hierarchical_ = false;
  ShmSegment shm_;
  Timeline* timeline_ = nullptr;
  TensorQueue queue_;
  EngineStats stats_;
  std::atomic<bool> joined_here_{false};
  std::unique_ptr<Controller> controller_;
  std::unique_ptr<OperationManager> operations_;
};

}  // namespace tf_ring

#endif  // TF_RING_COMMON_PROCESS_SET_H_
