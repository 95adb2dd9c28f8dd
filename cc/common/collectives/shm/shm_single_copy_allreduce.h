// Allreduce among the ranks of one node by reading each other's tensors
// directly (cross-memory attach) instead of staging them in shared memory.
//
// Every rank publishes its tensors' input and output addresses. The fused
// buffer is split into one slice per rank; each rank reduces its slice by
// reading the peers' inputs piece by piece into a cache-sized scratch and
// combining them with its own input straight into its output, then reads
// the other slices' results straight from the peers' outputs. Each byte of
// a peer's tensor crosses once, where staging copies it in and out of the
// segment, and there are three barriers per allreduce instead of two per
// chunk. Results are bit-identical to ShmAllreduce's: both combine in rank
// order.
#ifndef TF_RING_COMMON_COLLECTIVES_SHM_SINGLE_COPY_ALLREDUCE_H_
#define TF_RING_COMMON_COLLECTIVES_SHM_SINGLE_COPY_ALLREDUCE_H_

#include <vector>

#include "common/collectives/shm/shm_allreduce.h"

namespace tf_ring {

// Whether the single-copy walk takes this batch: the segment reads directly
// always (TF_RING_SHM_SINGLE_COPY=1), or where the cores are apart (the
// default) and the measurement said so (`cores_apart`); the batch is large
// enough for its syscalls and barrier to pay, and its addresses fit the
// segment's table. Every rank reaches the same answer: all inputs are agreed.
bool UseSingleCopy(const ShmSegment& shm, size_t tensors, int64_t bytes, bool cores_apart = false);

Status ShmSingleCopyAllreduce(ShmSegment* shm, const std::vector<Span>& spans, const ReduceSpec& spec);

}  // namespace tf_ring

#endif  // TF_RING_COMMON_COLLECTIVES_SHM_SINGLE_COPY_ALLREDUCE_H_
