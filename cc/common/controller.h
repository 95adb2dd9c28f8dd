// One negotiation round over MPI: every rank's RequestList goes to rank 0,
// which runs the Coordinator and broadcasts one ResponseList to all ranks.
#ifndef TF_RING_COMMON_CONTROLLER_H_
#define TF_RING_COMMON_CONTROLLER_H_

#include "common/coordinator.h"
#include "common/message.h"
#include "common/mpi_context.h"

namespace tf_ring {

class Controller {
 public:
  explicit Controller(const MpiContext* mpi) : mpi_(mpi), coordinator_(mpi->size()) {}

  Status Negotiate(const RequestList& mine, ResponseList* out);

 private:
  // Rank 0 only: turns every rank's requests into the ordered responses.
  ResponseList Coordinate(const std::vector<RequestList>& all);

  const MpiContext* mpi_;
  Coordinator coordinator_;
};

}  // namespace tf_ring

#endif  // TF_RING_COMMON_CONTROLLER_H_
