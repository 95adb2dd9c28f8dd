// The network step of the hierarchical allreduce; the in-host steps are the
// shared-memory allreduce's (shm_allreduce.cc), which calls this per chunk.
#include "common/collectives/collectives.h"
#include "common/transport/mpi_types.h"

namespace tf_ring {

AcrossHosts CrossHostAllreduce(const HostLayout& hosts, DataType dtype, ReduceOp op) {
  const MPI_Datatype type = MpiDatatype(dtype);
  const MPI_Op mpi_op = MpiReduceOp(op, dtype);  // Average sums here; scaling comes after
  const size_t elem = DataTypeSize(dtype);
  const MPI_Comm cross = hosts.cross_comm;
  return [=](char* data, int64_t elements) {
    const int rc = MpiAllreduceLarge(data, elements, type, elem, mpi_op, cross);
    if (rc != MPI_SUCCESS) {
      return Status::Unknown("MPI_Allreduce across hosts failed with code " + std::to_string(rc));
    }
    return Status::OK();
  };
}

}  // namespace tf_ring
