#include "common/controller.h"

namespace tf_ring {

Status Controller::Negotiate(const RequestList& mine, ResponseList* out) {
  const MPI_Comm comm = mpi_->comm();
  const int size = mpi_->size();
  const bool is_root = mpi_->rank() == 0;

  std::vector<char> sent = mine.Serialize();
  int length = static_cast<int>(sent.size());
  std::vector<int> lengths(is_root ? size : 0);
  MPI_Request req;
  MPI_Igather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, comm, &req);
  MpiContext::Wait(&req);

  std::vector<int> displs(is_root ? size : 0);
  std::vector<char> gathered;
  if (is_root) {
    int total = 0;
    for (int r = 0; r < size; ++r) {
      displs[r] = total;
      total += lengths[r];
    }
    gathered.resize(total);
  }
  MPI_Igatherv(sent.data(), length, MPI_BYTE, gathered.data(), lengths.data(), displs.data(),
               MPI_BYTE, 0, comm, &req);
  MpiContext::Wait(&req);

  std::vector<char> reply;
  int reply_length = 0;
  Status status;
  if (is_root) {
    std::vector<RequestList> all(size);
    for (int r = 0; r < size && status.ok(); ++r) {
      if (!RequestList::Parse(gathered.data() + displs[r], lengths[r], &all[r])) {
        status = Status::Unknown("malformed negotiation message from rank " + std::to_string(r) +
                                 "; are all ranks running the same tf_ring build?");
      }
    }
    ResponseList responses;
    if (status.ok()) {
      responses = Coordinate(all);
    } else {
      responses.shutdown = true;  // cannot trust the exchange: stop everyone
    }
    reply = responses.Serialize();
    reply_length = static_cast<int>(reply.size());
  }
  MPI_Ibcast(&reply_length, 1, MPI_INT, 0, comm, &req);
  MpiContext::Wait(&req);
  reply.resize(reply_length);
  MPI_Ibcast(reply.data(), reply_length, MPI_BYTE, 0, comm, &req);
  MpiContext::Wait(&req);

  if (!ResponseList::Parse(reply.data(), reply.size(), out)) {
    return Status::Unknown("malformed response list from the coordinator");
  }
  return status;
}

ResponseList Controller::Coordinate(const std::vector<RequestList>& all) {
  ResponseList out;
  for (size_t r = 0; r < all.size(); ++r) {
    out.shutdown = out.shutdown || all[r].shutdown;
    for (Request req : all[r].requests) {
      req.rank = static_cast<int32_t>(r);  // trust the transport, not the payload
      coordinator_.Add(req);
    }
  }
  out.responses = coordinator_.TakeReady();
  return out;
}

}  // namespace tf_ring
