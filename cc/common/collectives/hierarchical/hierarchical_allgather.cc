// Hierarchical allgather: each host gathers its ranks' blocks on local rank 0,
// the local rank 0s exchange whole hosts' blocks, and each shares the result
// inside its host. The network carries each block once per host pair, in one
// flow per host. The layout (PlanHostBlocks, base/counts.h) is summed in 64
// bits; the caller runs the flat allgather when it does not fit MPI's ints.
#include "common/collectives/collectives.h"

namespace tf_ring {

int HierarchicalAllgatherv(const HostLayout& hosts, const void* send, const std::vector<int64_t>& counts,
                           const HostBlocks& plan, char* recv) {
  // plan.fits_mpi: every value cast to int below fits.
  std::vector<int> host_counts(hosts.hosts), host_displs(hosts.hosts);
  for (int h = 0; h < hosts.hosts; ++h) {
    host_counts[h] = static_cast<int>(plan.host_counts[h]);
    host_displs[h] = static_cast<int>(plan.host_displs[h]);
  }
  // Per local rank of this host: its block's length and place in the host's block.
  std::vector<int> local_counts(hosts.local_size, 0), local_displs(hosts.local_size, 0);
  const int me_host = hosts.host;
  for (size_t r = 0; r < counts.size(); ++r) {
    if (hosts.host_of[r] != me_host) continue;
    local_counts[hosts.local_rank_of[r]] = static_cast<int>(counts[r]);
    local_displs[hosts.local_rank_of[r]] = static_cast<int>(plan.offsets[r] - plan.host_displs[me_host]);
  }

  char* my_host_block = recv + plan.host_displs[me_host];
  int rc = MPI_Gatherv(send, local_counts[hosts.local_rank], MPI_BYTE, my_host_block,
                       local_counts.data(), local_displs.data(), MPI_BYTE, 0, hosts.local_comm);
  if (rc != MPI_SUCCESS) return rc;
  if (hosts.local_rank == 0) {
    // The local rank 0s' cross communicator ranks them by host index.
    rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, host_counts.data(),
                        host_displs.data(), MPI_BYTE, hosts.cross_comm);
    if (rc != MPI_SUCCESS) return rc;
  }
  return MpiBcastLarge(recv, plan.total, 0, hosts.local_comm);
}

}  // namespace tf_ring
