#include "common/transport/host_layout.h"

#include <algorithm>

namespace tf_ring {

Status HostLayout::Init(const MpiContext& mpi, HostCounts* counts) {
  local_comm = mpi.local_comm();
  cross_comm = mpi.cross_comm();
  local_rank = mpi.local_rank();
  local_size = mpi.local_size();
  // A host's index is its local rank 0's place among the other hosts'.
  int leader_cross_rank = mpi.cross_rank();
  if (MPI_Bcast(&leader_cross_rank, 1, MPI_INT, 0, local_comm) != MPI_SUCCESS) {
    return Status::Unknown("MPI_Bcast of the host index failed");
  }
  host = leader_cross_rank;

  const int size = mpi.size();
  const int mine[3] = {local_rank, host, mpi.cross_rank()};
  std::vector<int> all(3 * size);
  if (MPI_Allgather(mine, 3, MPI_INT, all.data(), 3, MPI_INT, mpi.comm()) != MPI_SUCCESS) {
    return Status::Unknown("MPI_Allgather of the host layout failed");
  }
  local_rank_of.resize(size);
  host_of.resize(size);
  cross_rank_of.resize(size);
  std::vector<int> ranks_on_host;
  for (int r = 0; r < size; ++r) {
    local_rank_of[r] = all[3 * r];
    host_of[r] = all[3 * r + 1];
    cross_rank_of[r] = all[3 * r + 2];
    if (host_of[r] >= static_cast<int>(ranks_on_host.size())) ranks_on_host.resize(host_of[r] + 1, 0);
    ++ranks_on_host[host_of[r]];
  }
  hosts = static_cast<int>(ranks_on_host.size());
  counts->hosts = hosts;
  counts->min_local_size = counts->max_local_size = ranks_on_host.empty() ? 1 : ranks_on_host[0];
  for (int n : ranks_on_host) {
    counts->min_local_size = std::min(counts->min_local_size, n);
    counts->max_local_size = std::max(counts->max_local_size, n);
  }
  return Status::OK();
}

}  // namespace tf_ring
