// Single-copy reads from another process's memory on the same host
// (Linux cross-memory attach, process_vm_readv). Shared-memory staging moves
// every byte twice (into the segment, then out of it); reading a peer's
// tensor directly moves it once. The kernel allows it only where ptrace
// would be allowed, so the ranks probe it together before relying on it.
#ifndef TF_RING_COMMON_TRANSPORT_CROSS_MEMORY_H_
#define TF_RING_COMMON_TRANSPORT_CROSS_MEMORY_H_

#include <mpi.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <vector>

#include "common/base/status.h"

namespace tf_ring {

// Collective over `local_comm`: fills `pids` (one per local rank) and
// returns true when every local rank could read every other's memory.
// Returns false (and leaves `pids` empty) when `wanted` is false on any rank.
bool ProbeCrossMemory(MPI_Comm local_comm, bool wanted, std::vector<pid_t>* pids);

// Reads the remote ranges of process `pid` into the local ranges, in order;
// both lists cover the same number of bytes. Retries short reads.
Status ReadPeerMemory(pid_t pid, const std::vector<iovec>& local, const std::vector<iovec>& remote);

}  // namespace tf_ring

#endif  // TF_RING_COMMON_TRANSPORT_CROSS_MEMORY_H_
