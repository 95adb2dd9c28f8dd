#include "common/transport/mpi_context.h"

#include <chrono>
#include <cstdlib>
#include <thread>

#include "common/transport/peer_failure.h"

namespace tf_ring {

namespace {
bool g_we_initialized_mpi = false;
}

Status MpiContext::Init(const MPI_Comm* user_comm) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) {
    return Status::Precondition(
        "MPI has already been finalized in this process; tf_ring cannot start again. "
        "Call tf_ring.init() before MPI is finalized (for example by mpi4py at exit).");
  }
  if (!initialized) {
    // tf_ring makes no one-sided MPI calls; Open MPI's UCX one-sided
    // component prints a spurious error on machines without UCX hardware.
    setenv("OMPI_MCA_osc", "^ucx", /*overwrite=*/0);
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
      return Status::Unknown("MPI_Init_thread failed");
    }
    g_we_initialized_mpi = true;
  }
  MPI_Query_thread(&thread_level_);

  MPI_Comm base = user_comm ? *user_comm : MPI_COMM_WORLD;
  if (MPI_Comm_dup(base, &comm_) != MPI_SUCCESS) return Status::Unknown("MPI_Comm_dup failed");
  WatchForPeerFailure(comm_);  // the communicators split from it inherit the handler
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  SplitByHost();
  return Status::OK();
}

void MpiContext::SplitByHost() {
  MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local_comm_);
  MPI_Comm_rank(local_comm_, &local_rank_);
  MPI_Comm_size(local_comm_, &local_size_);
  // Ranks with the same local rank on different nodes form one cross communicator.
  MPI_Comm_split(comm_, local_rank_, rank_, &cross_comm_);
  MPI_Comm_rank(cross_comm_, &cross_rank_);
  MPI_Comm_size(cross_comm_, &cross_size_);
  // Homogeneous when the smallest and largest node run as many ranks.
  int extremes[2] = {local_size_, -local_size_};
  MPI_Allreduce(MPI_IN_PLACE, extremes, 2, MPI_INT, MPI_MIN, comm_);
  homogeneous_ = extremes[0] == -extremes[1];
}

Status MpiContext::InitGroup(MPI_Comm parent, const std::vector<int>& ranks, int tag) {
  MPI_Group parent_group, group;
  MPI_Comm_group(parent, &parent_group);
  MPI_Group_incl(parent_group, static_cast<int>(ranks.size()), ranks.data(), &group);
  const int rc = MPI_Comm_create_group(parent, group, tag, &comm_);
  MPI_Group_free(&group);
  MPI_Group_free(&parent_group);
  if (rc != MPI_SUCCESS) return Status::Unknown("MPI_Comm_create_group failed for a process set");
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  MPI_Query_thread(&thread_level_);
  SplitByHost();
  return Status::OK();
}

void MpiContext::Release() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (MPI_Comm* c : {&cross_comm_, &local_comm_, &comm_}) {
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
  }
}

void MpiContext::FinalizeIfOwned() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  // After a lost rank, MPI_Finalize waits forever for the dead process
  // when the job spans hosts (seen with Open MPI 5.0 ULFM on the simulated
  // hosts); the survivors' work is done, so they leave without it.
  if (PeerEverLost()) return;
  if (g_we_initialized_mpi && !finalized) MPI_Finalize();
  g_we_initialized_mpi = false;
}

int MpiContext::Wait(MPI_Request* request) {
  using Clock = std::chrono::steady_clock;
  int done = 0;
  const auto spin_until = Clock::now() + std::chrono::microseconds(50);
  while (Clock::now() < spin_until) {
    const int rc = MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return rc;  // only with errors returned (fault-tolerant mode)
    if (done) return MPI_SUCCESS;
  }
  auto nap = std::chrono::microseconds(5);
  const auto max_nap = std::chrono::microseconds(200);
  for (;;) {
    const int rc = MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return rc;
    if (done) return MPI_SUCCESS;
    std::this_thread::sleep_for(nap);
    if (nap < max_nap) nap *= 2;
  }
}

}  // namespace tf_ring
