// A node-local shared-memory segment (an MPI-3 shared window): one region
// per local rank, each with a barrier counter and double-buffered staging
// areas, so local ranks can exchange data with plain loads and stores.
#ifndef TF_RING_COMMON_SHM_SEGMENT_H_
#define TF_RING_COMMON_SHM_SEGMENT_H_

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <sys/types.h>

#include <vector>

#include "common/base/status.h"

namespace tf_ring {

class ShmSegment {
 public:
  // Collective over `local_comm`. Each region holds 2 buffers of
  // 2 * `area_bytes` (an input area and a result area), and a table where
  // its rank publishes tensor addresses for single-copy reads, which are
  // used when `single_copy` is true on every rank and the kernel allows
  // them (see cross_memory.h).
  Status Init(MPI_Comm local_comm, size_t area_bytes, bool single_copy = false);
  void Release();
  bool ready() const { return win_ != MPI_WIN_NULL; }

  int rank() const { return rank_; }
  int size() const { return size_; }
  size_t area_bytes() const { return area_bytes_; }
  char* input_area(int rank, int buffer) const { return data_[rank] + buffer * 2 * area_bytes_; }
  char* result_area(int rank, int buffer) const { return input_area(rank, buffer) + area_bytes_; }

  // Single-copy reads: each rank's pid, and its table of up to
  // `address_slots()` addresses (published before a barrier, read after it).
  bool single_copy() const { return !pids_.empty(); }
  pid_t pid(int rank) const { return pids_[rank]; }
  uint64_t* address_table(int rank) const { return reinterpret_cast<uint64_t*>(tables_[rank]); }
  static size_t address_slots();
  // A word per rank that its peers read after a barrier (a failure flag).
  std::atomic<uint64_t>* flag(int rank) const { return counters_[rank] + 8; }

  // Every local rank waits until all have arrived. Spins briefly, then
  // yields, so an oversubscribed peer gets the CPU it needs to arrive.
  void Barrier();

 private:
  std::atomic<uint64_t>* counter(int rank) const { return counters_[rank]; }

  MPI_Win win_ = MPI_WIN_NULL;
  int rank_ = 0, size_ = 1;
  size_t area_bytes_ = 0;
  uint64_t epoch_ = 0;
  std::vector<char*> data_;
  std::vector<std::atomic<uint64_t>*> counters_;
  std::vector<char*> tables_;
  std::vector<pid_t> pids_;  // empty: no single-copy reads
};

}  // namespace tf_ring

#endif  // TF_RING_COMMON_SHM_SEGMENT_H_
