// Allreduce among ranks of one node through a shared segment.
//
// The tensors of a (possibly fused) response are treated as one virtual
// buffer of spans, so fusion costs no packing copies. The buffer is cut
// into chunks that fit the cache; for each chunk every rank stages the
// slices other ranks will reduce, reduces its own slice (reading its own
// input in place, writing its output and a shared copy), and copies the
// other slices' results out. Double buffering needs two barriers a chunk.
#ifndef TF_RING_COMMON_COLLECTIVES_SHM_ALLREDUCE_H_
#define TF_RING_COMMON_COLLECTIVES_SHM_ALLREDUCE_H_

#include <cstdint>
#include <vector>

#include "common/message.h"
#include "common/shm_segment.h"

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

void ShmAllreduce(ShmSegment* shm, const std::vector<Span>& spans, const ReduceSpec& spec);

}  // namespace tf_ring

#endif  // TF_RING_COMMON_COLLECTIVES_SHM_ALLREDUCE_H_
