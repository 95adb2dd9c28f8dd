// Hierarchical broadcast: the root sends to one rank on each other host (the
// ranks sharing its local rank form a cross communicator), then every host
// broadcasts inside itself from that rank. The network carries the data
// once per host instead of once per rank.
#include "common/collectives/collectives.h"

namespace tf_ring {

int HierarchicalBcast(const HostLayout& hosts, void* buf, int64_t bytes, int root) {
  const int root_local_rank = hosts.local_rank_of[root];
  if (hosts.local_rank == root_local_rank) {
    const int rc = MpiBcastLarge(buf, bytes, hosts.cross_rank_of[root], hosts.cross_comm);
    if (rc != MPI_SUCCESS) return rc;
  }
  return MpiBcastLarge(buf, bytes, root_local_rank, hosts.local_comm);
}

}  // namespace tf_ring
