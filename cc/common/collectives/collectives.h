// Collective implementations over MPI, one per file. Each runs one response
// on the local entries it names (several entries = a fused batch) and
// returns the status every entry's callback will get.
#ifndef TF_RING_COMMON_COLLECTIVES_COLLECTIVES_H_
#define TF_RING_COMMON_COLLECTIVES_COLLECTIVES_H_

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

struct CollectiveContext {
  const MpiContext* mpi;
  ScratchBuffer* scratch;
  ShmSegment* shm;  // null unless every rank shares this node's memory
};

Status RunAllreduce(const CollectiveContext& ctx, const Response& resp,
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
