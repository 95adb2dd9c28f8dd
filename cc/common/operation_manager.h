// Runs one agreed response: collects the local entries it names, picks the
// implementation for its op, and completes every entry with the result.
#ifndef TF_RING_COMMON_OPERATION_MANAGER_H_
#define TF_RING_COMMON_OPERATION_MANAGER_H_

#include <memory>
#include <string>

#include "common/collectives/collectives.h"
#include "common/transport/device_transport.h"
#include "common/negotiation/joined_stand_in.h"
#include "common/base/message.h"
#include "common/transport/mpi_context.h"
#include "common/observability/stats.h"
#include "common/negotiation/tensor_queue.h"
#include "common/observability/timeline.h"

namespace tf_ring {

class OperationManager {
 public:
  // `shm` may be null (ranks on several nodes, or TF_RING_SHM=0); `hosts` is
  // null unless collectives run hierarchical (then `shm` is this host's).
  OperationManager(const MpiContext* mpi, ShmSegment* shm, const HostLayout* hosts, Timeline* timeline)
      : mpi_(mpi), shm_(shm), hosts_(hosts), timeline_(timeline), device_(MakeDeviceTransport(mpi)) {}

  // Runs `resp` and completes its entries, counting it in `stats` first.
  // GPU responses are only started here; their entries complete later.
  // Scratch memory beyond ScratchBound(fusion_threshold) is released after.
  void Execute(const Response& resp, TensorQueue* queue, EngineStats* stats, int64_t fusion_threshold);
  // The most scratch kept between collectives: a fused batch needs at most
  // the threshold (an allgather's own block again on top), so steady
  // training reuses it; one larger collective gives its memory back.
  static int64_t ScratchBound(int64_t fusion_threshold) { return 2 * fusion_threshold; }
  // The engine stops: device work in flight finishes or fails (see
  // DeviceTransport::Stop). `abort` when stopping for an error.
  // A process set's manager tags its timeline events with the set's id.
  void set_process_set(int32_t id) { process_set_id_ = id; }
  void Stop(bool abort, const std::string& reason) {
    if (device_) device_->Stop(abort, reason);
  }

 private:
  CollectiveContext Context(PhaseMarks* marks) { return {mpi_, &scratch_, shm_, hosts_, marks}; }
  Status Run(const Response& resp, std::vector<TensorEntry>& entries, PhaseMarks* marks);
  void MarkPhaseIfRecording(const Response& resp, bool recording);
  // Calls every entry's done with `status`, on the framework's threads
  // where an entry asks for it (TensorEntry::finish_on).
  void Finish(std::vector<TensorEntry>& entries, const Status& status);
  // Timeline events for every tensor of the batch, one per phase.
  void Record(const Response& resp, const std::vector<TensorEntry>& entries, const Status& status,
              Timeline::Clock::time_point start, Timeline::Clock::time_point end);

  const MpiContext* mpi_;
  ShmSegment* shm_;
  const HostLayout* hosts_;
  Timeline* timeline_;
  int32_t process_set_id_ = 0;
  ScratchBuffer scratch_;
  StandInStore stand_ins_;
  PhaseMarks marks_;
  bool ran_single_copy_ = false;  // the last batch read its peers' tensors directly (its timeline label)
  std::unique_ptr<DeviceTransport> device_;  // null in a CPU build
};

}  // namespace tf_ring

#endif  // TF_RING_COMMON_OPERATION_MANAGER_H_
