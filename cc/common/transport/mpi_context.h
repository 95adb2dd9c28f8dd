// The engine's MPI world: a private duplicate of the user's communicator (so
// user mpi4py traffic never matches ours), plus node-local and cross-node
// communicators for the layout queries.
#ifndef TF_RING_COMMON_MPI_CONTEXT_H_
#define TF_RING_COMMON_MPI_CONTEXT_H_

#include <mpi.h>

#include <string>
#include <vector>

#include "common/base/status.h"

namespace tf_ring {

class MpiContext {
 public:
  // `user_comm` may be null (use MPI_COMM_WORLD). Initializes MPI with
  // MPI_THREAD_MULTIPLE when nobody has yet.
  Status Init(const MPI_Comm* user_comm);
  // A process set's communicator: `ranks` (ascending ranks of `parent`)
  // form it, with its own node-local and cross communicators. Only those
  // ranks call this, all with the same `tag`.
  Status InitGroup(MPI_Comm parent, const std::vector<int>& ranks, int tag);
  // Frees the communicators; MPI itself stays up so init() may run again.
  void Release();
  // Finalizes MPI if this process initialized it. Call once, at exit.
  static void FinalizeIfOwned();

  MPI_Comm comm() const { return comm_; }
  MPI_Comm local_comm() const { return local_comm_; }
  MPI_Comm cross_comm() const { return cross_comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  int cross_rank() const { return cross_rank_; }
  int cross_size() const { return cross_size_; }
  bool homogeneous() const { return homogeneous_; }
  int thread_level() const { return thread_level_; }

  // Completes a non-blocking MPI request. Spins briefly (peers are usually
  // close behind), then sleeps between tests so a rank waiting on slower
  // peers leaves the CPU to TensorFlow. Returns MPI_Test's error code, which is
  // not MPI_SUCCESS only in fault-tolerant mode (a lost rank).
  static int Wait(MPI_Request* request);

 private:
  // Splits comm_ into the node-local and cross communicators (collective).
  void SplitByHost();

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm local_comm_ = MPI_COMM_NULL;
  MPI_Comm cross_comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  int local_rank_ = 0, local_size_ = 1;
  int cross_rank_ = 0, cross_size_ = 1;
  bool homogeneous_ = true;
  int thread_level_ = 0;
};

}  // namespace tf_ring

#endif  // TF_RING_COMMON_MPI_CONTEXT_H_
