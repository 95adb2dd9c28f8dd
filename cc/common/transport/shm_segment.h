// A node-local shared-memory segment (an MPI-3 shared window): one region
// per local rank, each with a barrier counter and double-buffered staging
// areas, so local ranks can exchange data with plain loads and stores.
#ifndef TF_RING_COMMON_SHM_SEGMENT_H_
#define TF_RING_COMMON_SHM_SEGMENT_H_

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "common/base/status.h"

namespace tf_ring {

class ShmSegment {
 public:
  // Collective over `local_comm`. Each region holds 2 buffers of
  // 2 * `area_bytes` (an input area and a result area).
  Status Init(MPI_Comm local_comm, size_t area_bytes);
  void Release();
  bool ready() const { return win_ != MPI_WIN_NULL; }

  int rank() const { return rank_; }
  int size() const { return size_; }
  size_t area_bytes() const { return area_bytes_; }
  char* input_area(int rank, int buffer) const { return data_[rank] + buffer * 2 * area_bytes_; }
  char* result_area(int rank, int buffer) const { return input_area(rank, buffer) + area_bytes_; }

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
};

}  // namespace tf_ring

#endif  // TF_RING_COMMON_SHM_SEGMENT_H_
