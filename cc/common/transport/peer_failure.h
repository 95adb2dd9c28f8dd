// Fault-tolerant mode (MPI ULFM): a lost rank becomes an error every
// survivor sees, instead of MPI aborting the job.
//
// Off unless TF_RING_ULFM=1 (tfringrun's elastic mode sets it, with mpirun's
// `--with-ft ulfm`). When on, the engine's communicators return errors to a
// handler that notes the loss and revokes the communicator, so every other
// survivor's pending and next MPI call fails too and no rank stays blocked
// on the dead one. The engine then stops with an Unavailable status, which
// tf_ring.elastic turns into HorovodInternalError; the survivors shrink the
// communicator and start a new engine (tf_ring/elastic/in_process.py).
#ifndef TF_RING_COMMON_TRANSPORT_PEER_FAILURE_H_
#define TF_RING_COMMON_TRANSPORT_PEER_FAILURE_H_

#include <mpi.h>

#include <string>

#include "common/base/status.h"

namespace tf_ring {

// True when TF_RING_ULFM=1 and this MPI has the ULFM extension.
bool FaultTolerantMode();
// Routes `comm`'s errors to the peer-failure handler (fault-tolerant mode only).
void WatchForPeerFailure(MPI_Comm comm);
// Since the last ClearPeerLoss(): did any watched communicator lose a rank?
bool PeerLost();
void ClearPeerLoss();
// Whether this process ever saw a rank lost (ClearPeerLoss does not reset it).
bool PeerEverLost();
// Notes a lost rank found without MPI (a local peer's process gone while
// waiting on it in shared memory); `rank` < 0 when it is not known which.
void NotePeerLost(int rank);
// Revokes `comm` if a peer was lost, so every survivor leaves its calls on it.
void RevokeAfterPeerLoss(MPI_Comm comm);
// Waits for `request` (an operation on `comm`) to finish. In fault-tolerant
// mode it also returns, with MPIX_ERR_REVOKED, once another survivor has
// revoked `comm`: a rank blocked in a send to a live peer that left the
// collective is not always released by the revocation alone.
int WaitOrRevoked(MPI_Request* request, MPI_Comm comm);
// The error every pending collective gets once a rank is lost.
Status PeerLostStatus();

}  // namespace tf_ring

#endif  // TF_RING_COMMON_TRANSPORT_PEER_FAILURE_H_
