// Large host buffers that stay warm: mapped once, on huge pages where the
// kernel grants them for the asking (transparent_hugepage "madvise", the
// default of most distributions), and kept by their owner across calls.
//
// Why: a fresh 64 MB buffer from malloc is a new mmap whose 16,384 small
// pages each fault on first touch (about 10 ms on a 2-core VM, as long as
// the copy itself); MPI's in-place Allreduce never pays that. A buffer
// mapped here faults once per 2 MiB page instead, and only on its first use.
#ifndef TF_RING_COMMON_WARM_MEMORY_H_
#define TF_RING_COMMON_WARM_MEMORY_H_

#include <cstddef>

namespace tf_ring {

// Below this a block is not worth a mapping of its own: huge pages need
// 2 MiB-aligned 2 MiB extents, and glibc's heap keeps smaller blocks warm.
constexpr size_t kHugePageBytes = size_t{2} << 20;

// A private anonymous mapping of at least `bytes` (rounded up to a page, or
// to 2 MiB and 2 MiB-aligned from 2 MiB on, with MADV_HUGEPAGE asked), or
// null when the memory cannot be had. Its pages fault on first touch.
void* MapWarm(size_t bytes);
// The size MapWarm(bytes) really maps (what UnmapWarm must be given).
size_t WarmMappedBytes(size_t bytes);
// Releases a block from MapWarm(bytes) (same `bytes`); null is a no-op.
void UnmapWarm(void* block, size_t bytes);

}  // namespace tf_ring

#endif  // TF_RING_COMMON_WARM_MEMORY_H_
