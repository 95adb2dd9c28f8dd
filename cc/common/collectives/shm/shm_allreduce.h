// Allreduce among ranks of one node through a shared segment.
//
// The tensors of a (possibly fused) response are treated as one virtual
// buffer of spans, so fusion costs no packing copies. The buffer is cut
// into chunks that fit the cache; for each chunk every rank stages the
// slices other ranks will reduce, reduces its own slice (reading its own
// input in place) into a shared copy and its output, and copies the other
// slices' results out. Double buffering needs two barriers a chunk.
//
// Across hosts the same walk is the hierarchical allreduce: after reducing
// its slice inside the host, each rank hands the slice to `across` (an
// allreduce among the ranks holding that slice on the other hosts) before
// scaling and publishing it.
#ifndef TF_RING_COMMON_COLLECTIVES_SHM_ALLREDUCE_H_
#define TF_RING_COMMON_COLLECTIVES_SHM_ALLREDUCE_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "common/base/message.h"
#include "common/transport/shm_segment.h"
#include "common/base/status.h"

namespace tf_ring {

struct Span {
  const char* in;
  char* out;
  int64_t bytes;
};

struct ReduceSpec {
  DataType dtype;
  ReduceOp op;
  double postscale;         // applied after the reduction (floats: includes 1/size for Average)
  int64_t integer_divisor;  // integer Average: exact division by the rank count
};

// Combines `elements` reduced values in place with the other hosts'; an
// error stops the allreduce (every host sees its MPI call fail alike).
using AcrossHosts = std::function<Status(char* data, int64_t elements)>;

// `across` is empty when every rank is on this node. The buffer is staged
// `chunk_bytes` at a time (at most the segment's area; 0: the whole area).
Status ShmAllreduce(ShmSegment* shm, const std::vector<Span>& spans, const ReduceSpec& spec,
                    const AcrossHosts& across = AcrossHosts(), size_t chunk_bytes = 0);

}  // namespace tf_ring

#endif  // TF_RING_COMMON_COLLECTIVES_SHM_ALLREDUCE_H_
