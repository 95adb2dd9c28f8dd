#include "common/transport/shm_segment.h"

#include "common/transport/cross_memory.h"

#include <sched.h>

#include <chrono>
#include <thread>

namespace tf_ring {

namespace {
constexpr size_t kCounterBytes = 4096;  // counter and flag on their own page
constexpr size_t kTableBytes = 64 << 10;  // 8,192 addresses: 4,096 tensors' input and output
constexpr size_t kHeaderBytes = kCounterBytes + kTableBytes;  // data page-aligned
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared counters need lock-free atomics");

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}
}  // namespace

size_t ShmSegment::address_slots() { return kTableBytes / sizeof(uint64_t); }

Status ShmSegment::Init(MPI_Comm local_comm, size_t area_bytes, bool single_copy) {
  MPI_Comm_rank(local_comm, &rank_);
  MPI_Comm_size(local_comm, &size_);
  area_bytes_ = area_bytes;
  const MPI_Aint bytes = static_cast<MPI_Aint>(kHeaderBytes + 4 * area_bytes);
  char* mine = nullptr;
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "alloc_shared_noncontig", "true");  // each region near its owner
  int rc = MPI_Win_allocate_shared(bytes, 1, info, local_comm, &mine, &win_);
  MPI_Info_free(&info);
  if (rc != MPI_SUCCESS) {
    win_ = MPI_WIN_NULL;
    return Status::Unknown("MPI_Win_allocate_shared failed");
  }
  new (mine) std::atomic<uint64_t>(0);
  new (reinterpret_cast<std::atomic<uint64_t>*>(mine) + 8) std::atomic<uint64_t>(0);
  data_.assign(size_, nullptr);
  counters_.assign(size_, nullptr);
  tables_.assign(size_, nullptr);
  for (int r = 0; r < size_; ++r) {
    MPI_Aint peer_bytes;
    int disp_unit;
    char* base = nullptr;
    MPI_Win_shared_query(win_, r, &peer_bytes, &disp_unit, &base);
    counters_[r] = reinterpret_cast<std::atomic<uint64_t>*>(base);
    tables_[r] = base + kCounterBytes;
    data_[r] = base + kHeaderBytes;
  }
  epoch_ = 0;
  if (size_ > 1) ProbeCrossMemory(local_comm, single_copy, &pids_);
  MPI_Barrier(local_comm);  // every counter is initialized before first use
  return Status::OK();
}

void ShmSegment::Release() {
  if (win_ != MPI_WIN_NULL) MPI_Win_free(&win_);
  data_.clear();
  counters_.clear();
  tables_.clear();
  pids_.clear();
}

void ShmSegment::Barrier() {
  ++epoch_;
  counter(rank_)->store(epoch_, std::memory_order_release);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    int spins = 0;
    while (counter(r)->load(std::memory_order_acquire) < epoch_) {
      if (++spins < 2000) {
        CpuRelax();
      } else if (spins < 4000) {
        sched_yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
  }
}

}  // namespace tf_ring
