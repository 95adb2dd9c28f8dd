// Collective implementations over MPI, one per file. Each runs one response
// on the local entries it names (several entries = a fused batch) and
// returns the status every entry's callback will get.
#ifndef TF_RING_COMMON_COLLECTIVES_COLLECTIVES_H_
#define TF_RING_COMMON_COLLECTIVES_COLLECTIVES_H_

#include <chrono>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "common/base/counts.h"
#include "common/transport/host_layout.h"
#include "common/base/message.h"
#include "common/transport/mpi_context.h"
#include "common/collectives/shm/shm_allreduce.h"
#include "common/transport/shm_segment.h"
#include "common/base/tensor_entry.h"

namespace tf_ring {

// Scratch space reused across cycles so fused batches do not allocate. The
// operation manager releases it after a collective that needed more than
// its bound, so one large collective does not hold memory until shutdown.
class ScratchBuffer {
 public:
  // Null when the memory cannot be had: the caller then agrees the failure
  // with the other ranks (AgreeToProceed) instead of leaving alone.
  char* Get(size_t bytes) {
    if (bytes == 0) bytes = 1;
    if (bytes_ < bytes) {
      data_.reset();  // free first: the old contents are never needed
      bytes_ = 0;
      data_.reset(new (std::nothrow) char[bytes]);
      if (!data_) return nullptr;
      bytes_ = bytes;
    }
    return data_.get();
  }
  void Trim(size_t bound) {
    if (bytes_ > bound) {
      data_.reset();
      bytes_ = 0;
    }
  }
  size_t capacity() const { return bytes_; }

 private:
  std::unique_ptr<char[]> data_;
  size_t bytes_ = 0;
};

// Where a collective's phases begin (packing, the transfer, unpacking), for
// the timeline. Each phase ends where the next begins.
class PhaseMarks {
 public:
  struct Mark {
    const char* phase;
    std::chrono::steady_clock::time_point at;
  };
  void Begin(const char* phase) { marks_.push_back({phase, std::chrono::steady_clock::now()}); }
  const std::vector<Mark>& marks() const { return marks_; }
  void Clear() { marks_.clear(); }

 private:
  std::vector<Mark> marks_;
};

struct CollectiveContext {
  const MpiContext* mpi;
  ScratchBuffer* scratch;
  ShmSegment* shm;           // this node's segment: null unless all ranks share it or `hosts` is set
  const HostLayout* hosts;   // null unless collectives run hierarchical across hosts
  PhaseMarks* marks;         // null unless the timeline is recording
};

// Whether `op` runs hierarchically in this context (the others stay flat).
inline bool RunsHierarchical(const CollectiveContext& ctx, OpType op) {
  return ctx.hosts != nullptr &&
         (op == OpType::kAllreduce || op == OpType::kAllgather || op == OpType::kBroadcast);
}

inline void MarkPhase(const CollectiveContext& ctx, const char* phase) {
  if (ctx.marks) ctx.marks->Begin(phase);
}

constexpr char kMemcpyIn[] = "MEMCPY_IN_FUSION_BUFFER";
constexpr char kMemcpyOut[] = "MEMCPY_OUT_FUSION_BUFFER";

Status RunAllreduce(const CollectiveContext& ctx, const Response& resp,
                    std::vector<TensorEntry>& entries);
// Adasum allreduce (collectives/adasum/adasum.cc); the coordinator admits it only
// for float16/32/64 on a power-of-two number of ranks.
Status RunAdasum(const CollectiveContext& ctx, const Response& resp,
                 std::vector<TensorEntry>& entries);
Status RunAllgather(const CollectiveContext& ctx, const Response& resp,
                    std::vector<TensorEntry>& entries);
Status RunBroadcast(const CollectiveContext& ctx, const Response& resp,
                    std::vector<TensorEntry>& entries);
Status RunAlltoall(const CollectiveContext& ctx, const Response& resp,
                   std::vector<TensorEntry>& entries);
Status RunReducescatter(const CollectiveContext& ctx, const Response& resp,
                        std::vector<TensorEntry>& entries);

// MPI takes int counts; these split larger transfers into int-sized pieces.
int MpiAllreduceLarge(void* buf, int64_t count, MPI_Datatype type, size_t elem_size, MPI_Op op,
                      MPI_Comm comm);
int MpiBcastLarge(void* buf, int64_t bytes, int root, MPI_Comm comm);

// The cross-host step of the hierarchical allreduce: each rank's slice,
// reduced inside its host, is allreduced with the same slice on the other
// hosts (one rank per host per slice, so every rank's link share works).
AcrossHosts CrossHostAllreduce(const HostLayout& hosts, DataType dtype, ReduceOp op);

// Broadcast from global rank `root` crossing the network once per host: to
// one rank per host (those with the root's local rank), then inside each host.
int HierarchicalBcast(const HostLayout& hosts, void* buf, int64_t bytes, int root);

// The transfer of the hierarchical allgather: gathered inside each host,
// exchanged among one rank per host (local rank 0s), shared inside the
// host. `recv` gets every block at its plan.offsets place; the plan must
// fit MPI's int counts (plan.fits_mpi).
int HierarchicalAllgatherv(const HostLayout& hosts, const void* send, const std::vector<int64_t>& counts,
                           const HostBlocks& plan, char* recv);

// "allgather of tensor 'a'" (", fused with 3 more" for a batch), for errors.
std::string DescribeBatch(const Response& resp);

// Before a collective moves data, every rank says whether its local
// preparation (allocating outputs or scratch) succeeded. If any failed,
// every rank returns the same ResourceExhausted error naming those ranks,
// and no rank enters the transfer, so none waits for a rank that left.
Status AgreeToProceed(const CollectiveContext& ctx, const Response& resp, const Status& local);

}  // namespace tf_ring

#endif  // TF_RING_COMMON_COLLECTIVES_COLLECTIVES_H_
