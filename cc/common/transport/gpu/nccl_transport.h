// The CUDA build's device transport: NCCL over one communicator spanning the
// engine's MPI ranks, on the engine's own CUDA stream.
#ifndef TF_RING_COMMON_GPU_NCCL_TRANSPORT_H_
#define TF_RING_COMMON_GPU_NCCL_TRANSPORT_H_

#include <memory>

#include "common/transport/device_transport.h"

namespace tf_ring {

std::unique_ptr<DeviceTransport> MakeNcclTransport(const MpiContext* mpi);

}  // namespace tf_ring

#endif  // TF_RING_COMMON_GPU_NCCL_TRANSPORT_H_
