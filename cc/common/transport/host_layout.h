// Which host every rank is on, for the hierarchical collectives: each rank's
// local rank and host index, and the communicators inside a host (local) and
// across hosts (cross: the ranks with the same local rank, one per host).
#ifndef TF_RING_COMMON_HOST_LAYOUT_H_
#define TF_RING_COMMON_HOST_LAYOUT_H_

#include <mpi.h>

#include <vector>

#include "common/transport/hierarchical_choice.h"
#include "common/transport/mpi_context.h"
#include "common/base/status.h"

namespace tf_ring {

struct HostLayout {
  MPI_Comm local_comm = MPI_COMM_NULL;  // this host's ranks, by global rank
  MPI_Comm cross_comm = MPI_COMM_NULL;  // one rank per host with this rank's local rank
  int local_rank = 0, local_size = 1;
  int host = 0, hosts = 1;              // host index = cross rank of the host's local rank 0
  std::vector<int> local_rank_of;       // by global rank
  std::vector<int> host_of;             // by global rank
  std::vector<int> cross_rank_of;       // by global rank: its rank in its cross communicator

  // Collective over the job. Fills the tables and `counts` (with
  // shm_allowed left as given) for ChooseHierarchical.
  Status Init(const MpiContext& mpi, HostCounts* counts);
};

}  // namespace tf_ring

#endif  // TF_RING_COMMON_HOST_LAYOUT_H_
