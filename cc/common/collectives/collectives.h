// Collective implementations over MPI, one per file. Each runs one response
// on the local entries it names (several entries = a fused batch) and
// returns the status every entry's callback will get.
#ifndef TF_RING_COMMON_COLLECTIVES_COLLECTIVES_H_
#define TF_RING_COMMON_COLLECTIVES_COLLECTIVES_H_

#include <chrono>
#include <vector>

#include "common/message.h"
#include "common/mpi_context.h"
#include "common/shm_segment.h"
#include "common/tensor_entry.h"

namespace tf_ring {

// Scratch space reused across cycles so fused batches do not allocate.
class ScratchBuffer {
 public:
  char* Get(size_t bytes) {
    if (bytes_.size() < bytes) bytes_.resize(bytes);
    return bytes_.data();
  }

 private:
  std::vector<char> bytes_;
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
  ShmSegment* shm;     // null unless every rank shares this node's memory
  PhaseMarks* marks;   // null unless the timeline is recording
};

inline void MarkPhase(const CollectiveContext& ctx, const char* phase) {
  if (ctx.marks) ctx.marks->Begin(phase);
}

constexpr char kMemcpyIn[] = "MEMCPY_IN_FUSION_BUFFER";
constexpr char kMemcpyOut[] = "MEMCPY_OUT_FUSION_BUFFER";

Status RunAllreduce(const CollectiveContext& ctx, const Response& resp,
                    std::vector<TensorEntry>& entries);
// Adasum allreduce (collectives/adasum.cc); the coordinator admits it only
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

}  // namespace tf_ring

#endif  // TF_RING_COMMON_COLLECTIVES_COLLECTIVES_H_
