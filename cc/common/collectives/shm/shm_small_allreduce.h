// Allreduce of a small buffer among the ranks of one node, with one barrier.
//
// Every rank stages its whole buffer, waits once, and reduces every rank's
// copy itself, in rank order, straight into its output. The staged path
// (shm_allreduce.h) splits the work but needs a second barrier to share the
// reduced slices; up to 64 KB that barrier, a round trip between
// cores, costs more than the arithmetic it saves. Results are bit-identical
// to the staged path: the same values combined in the same order, then
// divided and scaled the same way.
#ifndef TF_RING_COMMON_COLLECTIVES_SHM_SMALL_ALLREDUCE_H_
#define TF_RING_COMMON_COLLECTIVES_SHM_SMALL_ALLREDUCE_H_

#include <cstdint>
#include <vector>

#include "common/base/status.h"
#include "common/collectives/shm/shm_allreduce.h"
#include "common/transport/shm_segment.h"

namespace tf_ring {

// Whether a response of `bytes` in all takes this path on `shm`: the same
// answer on every rank (the size is agreed), only inside one node.
bool UseSmallShmAllreduce(const ShmSegment& shm, int64_t bytes);

Status ShmSmallAllreduce(ShmSegment* shm, const std::vector<Span>& spans, const ReduceSpec& spec);

}  // namespace tf_ring

#endif  // TF_RING_COMMON_COLLECTIVES_SHM_SMALL_ALLREDUCE_H_
