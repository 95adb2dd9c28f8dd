// The network step of the hierarchical allreduce; the in-host steps are the
// shared-memory allreduce's (shm_allreduce.cc), which calls this per chunk.
#include <limits>

#include "common/collectives/collectives.h"
#include "common/transport/mpi_context.h"
#include "common/transport/mpi_types.h"
#include "common/transport/peer_failure.h"

namespace tf_ring {

AcrossHosts CrossHostAllreduce(const HostLayout& hosts, DataType dtype, ReduceOp op) {
  const MPI_Datatype type = MpiDatatype(dtype);
  const MPI_Op mpi_op = MpiReduceOp(op, dtype);  // Average sums here; scaling comes after
  const size_t elem = DataTypeSize(dtype);
  const MPI_Comm cross = hosts.cross_comm;
  const bool fault_tolerant = FaultTolerantMode();
  return [=](char* data, int64_t elements) {
    int rc = MPI_SUCCESS;
    if (fault_tolerant && elements <= std::numeric_limits<int>::max()) {
      // One slice of a shared-memory chunk: nonblocking, so that a revoked
      // communicator (a host peer of the other side died) releases this rank.
      MPI_Request request;
      rc = MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(elements), type, mpi_op, cross,
                          &request);
      if (rc == MPI_SUCCESS) rc = WaitOrRevoked(&request, cross);
      if (rc != MPI_SUCCESS) return PeerLost() ? PeerLostStatus() : Status::Unknown(
          "MPI_Iallreduce across hosts failed with code " + std::to_string(rc));
      return Status::OK();
    }
    if (elements <= std::numeric_limits<int>::max()) {
      // Nonblocking and waited on by MpiContext::Wait, which naps after a
      // short spin: a slice takes milliseconds on the network, and a
      // blocking MPI_Allreduce would poll for all of them, holding a core
      // the host's other ranks (and the kernel's network stack) need, 4
      // ranks sharing 2 cores on the simulated hosts (issue 51).
      MPI_Request request;
      rc = MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(elements), type, mpi_op, cross,
                          &request);
      if (rc == MPI_SUCCESS) rc = MpiContext::Wait(&request);
    } else {
      rc = MpiAllreduceLarge(data, elements, type, elem, mpi_op, cross);
    }
    if (rc != MPI_SUCCESS) {
      return Status::Unknown("MPI_Allreduce across hosts failed with code " + std::to_string(rc));
    }
    return Status::OK();
  };
}

}  // namespace tf_ring
