// Hierarchical allgather: each host gathers its ranks' blocks on local rank 0,
// the local rank 0s exchange whole hosts' blocks, and each shares the result
// inside its host. The network carries each block once per host pair, in one
// flow per host.
#include <algorithm>

#include "common/collectives/collectives.h"

namespace tf_ring {

namespace {
// Global ranks ordered host by host, each host's in local rank order.
std::vector<int> HostOrder(const HostLayout& hosts) {
  std::vector<int> order(hosts.host_of.size());
  for (size_t r = 0; r < order.size(); ++r) order[r] = static_cast<int>(r);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    if (hosts.host_of[a] != hosts.host_of[b]) return hosts.host_of[a] < hosts.host_of[b];
    return hosts.local_rank_of[a] < hosts.local_rank_of[b];
  });
  return order;
}
}  // namespace

std::vector<int64_t> HostOrderOffsets(const HostLayout& hosts, const std::vector<int>& counts) {
  std::vector<int64_t> offsets(counts.size());
  int64_t at = 0;
  for (int r : HostOrder(hosts)) {
    offsets[r] = at;
    at += counts[r];
  }
  return offsets;
}

int HierarchicalAllgatherv(const HostLayout& hosts, const void* send, const std::vector<int>& counts,
                           const std::vector<int64_t>& offsets, char* recv) {
  // Per host: its block's start and length; per local rank of this host: the same.
  std::vector<int> host_counts(hosts.hosts, 0), host_displs(hosts.hosts, 0);
  std::vector<int> local_counts(hosts.local_size, 0), local_displs(hosts.local_size, 0);
  std::vector<bool> host_seen(hosts.hosts, false);
  int64_t total = 0;
  for (int r : HostOrder(hosts)) {
    const int h = hosts.host_of[r];
    if (!host_seen[h]) host_displs[h] = static_cast<int>(offsets[r]);
    host_seen[h] = true;
    host_counts[h] += counts[r];
    total += counts[r];
  }
  const int me_host = hosts.host;
  for (size_t r = 0; r < counts.size(); ++r) {
    if (hosts.host_of[r] != me_host) continue;
    local_counts[hosts.local_rank_of[r]] = counts[r];
    local_displs[hosts.local_rank_of[r]] = static_cast<int>(offsets[r] - host_displs[me_host]);
  }

  char* my_host_block = recv + host_displs[me_host];
  int rc = MPI_Gatherv(send, local_counts[hosts.local_rank], MPI_BYTE, my_host_block,
                       local_counts.data(), local_displs.data(), MPI_BYTE, 0, hosts.local_comm);
  if (rc != MPI_SUCCESS) return rc;
  if (hosts.local_rank == 0) {
    // The local rank 0s' cross communicator ranks them by host index.
    rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, host_counts.data(),
                        host_displs.data(), MPI_BYTE, hosts.cross_comm);
    if (rc != MPI_SUCCESS) return rc;
  }
  return MpiBcastLarge(recv, total, 0, hosts.local_comm);
}

}  // namespace tf_ring
