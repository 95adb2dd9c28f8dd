#include "common/base/warm_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

namespace tf_ring {

namespace {
size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }
size_t PageBytes() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}
}  // namespace

size_t WarmMappedBytes(size_t bytes) {
  if (bytes == 0) bytes = 1;
  return bytes >= kHugePageBytes ? RoundUp(bytes, kHugePageBytes) : RoundUp(bytes, PageBytes());
}

void* MapWarm(size_t bytes) {
  const size_t size = WarmMappedBytes(bytes);
  if (size < kHugePageBytes) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? nullptr : p;
  }
  // Map 2 MiB more than needed and trim both ends to a 2 MiB boundary: a
  // huge page can only back an aligned extent.
  const size_t over = size + kHugePageBytes;
  void* raw = mmap(nullptr, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = RoundUp(start, kHugePageBytes);
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t tail = aligned + size, end = start + over;
  if (end > tail) munmap(reinterpret_cast<void*>(tail), end - tail);
  void* block = reinterpret_cast<void*>(aligned);
  // Before any page is touched, so the first faults already take huge
  // pages. Refused (THP "never", or no THP in the kernel): small pages.
#ifdef MADV_HUGEPAGE
  madvise(block, size, MADV_HUGEPAGE);
#endif
  return block;
}

void UnmapWarm(void* block, size_t bytes) {
  if (block != nullptr) munmap(block, WarmMappedBytes(bytes));
}

}  // namespace tf_ring
