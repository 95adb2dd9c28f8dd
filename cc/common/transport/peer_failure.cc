#include "common/transport/peer_failure.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

namespace tf_ring {

namespace {

std::atomic<bool> g_lost{false};
std::atomic<bool> g_ever_lost{false};  // not cleared: decides MPI_Finalize at exit
std::mutex g_mu;
std::string g_detail;  // which ranks, as the handler saw it (guarded by g_mu)

#ifdef MPIX_ERR_PROC_FAILED
bool IsPeerFailure(int code) {
  int cls = code;
  MPI_Error_class(code, &cls);
  return cls == MPIX_ERR_PROC_FAILED || cls == MPIX_ERR_PROC_FAILED_PENDING ||
         cls == MPIX_ERR_REVOKED;
}

// The ranks of `comm` known to have failed, e.g. "2" or "1, 2"; empty when
// this rank only saw the revocation another survivor caused.
std::string FailedRanks(MPI_Comm comm) {
  MPI_Group failed = MPI_GROUP_NULL, all = MPI_GROUP_NULL;
  if (MPIX_Comm_get_failed(comm, &failed) != MPI_SUCCESS) return "";
  int count = 0;
  MPI_Group_size(failed, &count);
  std::string text;
  if (count > 0) {
    std::vector<int> in(count), out(count);
    for (int i = 0; i < count; ++i) in[i] = i;
    MPI_Comm_group(comm, &all);
    MPI_Group_translate_ranks(failed, count, in.data(), all, out.data());
    for (int i = 0; i < count; ++i) text += (i ? ", " : "") + std::to_string(out[i]);
    MPI_Group_free(&all);
  }
  MPI_Group_free(&failed);
  return text;
}

bool IsRevoked(MPI_Comm comm) {
  int revoked = 0;
  return MPIX_Comm_is_revoked(comm, &revoked) == MPI_SUCCESS && revoked;
}

void OnCommError(MPI_Comm* comm, int* code, ...) {
  // A nonblocking collective cut short by a revocation reports a generic
  // error (libnbc: MPI_ERR_OTHER); the revoked communicator says why.
  if (!IsPeerFailure(*code) && !IsRevoked(*comm)) {
    // Not a lost rank: keep MPI's default behaviour for real bugs.
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(*code, text, &length);
    std::fprintf(stderr, "tf_ring: MPI error on the engine's communicator: %.*s\n", length, text);
    MPI_Abort(*comm, *code);
    return;
  }
  const std::string ranks = FailedRanks(*comm);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_detail.empty() && !ranks.empty()) g_detail = ranks;
  }
  g_lost = true;
  g_ever_lost = true;
  MPIX_Comm_revoke(*comm);  // every survivor blocked on this communicator gets out
}
#endif

}  // namespace

bool FaultTolerantMode() {
#ifdef MPIX_ERR_PROC_FAILED
  const char* value = std::getenv("TF_RING_ULFM");
  return value != nullptr && std::strcmp(value, "1") == 0;
#else
  return false;
#endif
}

void WatchForPeerFailure(MPI_Comm comm) {
#ifdef MPIX_ERR_PROC_FAILED
  if (comm == MPI_COMM_NULL || !FaultTolerantMode()) return;
  static MPI_Errhandler handler = MPI_ERRHANDLER_NULL;
  static std::once_flag once;
  std::call_once(once, [] { MPI_Comm_create_errhandler(&OnCommError, &handler); });
  MPI_Comm_set_errhandler(comm, handler);
#else
  (void)comm;
#endif
}

bool PeerLost() { return g_lost.load(std::memory_order_relaxed); }

bool PeerEverLost() { return g_ever_lost.load(); }

void ClearPeerLoss() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_detail.clear();
  g_lost = false;
}

void NotePeerLost(int rank) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_detail.empty() && rank >= 0) g_detail = std::to_string(rank);
  }
  g_lost = true;
  g_ever_lost = true;
}

void RevokeAfterPeerLoss(MPI_Comm comm) {
#ifdef MPIX_ERR_PROC_FAILED
  if (PeerLost() && FaultTolerantMode() && comm != MPI_COMM_NULL) MPIX_Comm_revoke(comm);
#else
  (void)comm;
#endif
}

int WaitOrRevoked(MPI_Request* request, MPI_Comm comm) {
#ifdef MPIX_ERR_PROC_FAILED
  if (FaultTolerantMode()) {
    for (;;) {
      int done = 0;
      const int rc = MPI_Test(request, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS || done) return rc;
      if (IsRevoked(comm)) {
        NotePeerLost(-1);
        // The request is left behind on the dead communicator: MPI may not
        // free an unfinished collective, and nothing completes it any more.
        return MPIX_ERR_REVOKED;
      }
    }
  }
#endif
  (void)comm;
  return MPI_Wait(request, MPI_STATUS_IGNORE);
}

Status PeerLostStatus() {
  std::string ranks;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    ranks = g_detail;
  }
  return Status::Unavailable(
      "tf_ring lost a rank" + (ranks.empty() ? std::string() : " (rank " + ranks + " of the old world)") +
      ": its process or host is gone. Every surviving rank fails its pending collectives "
      "together; wrap training in tf_ring.elastic.run (it restores the last commit, shrinks the "
      "job to the ranks left and calls the function again), or restart the job.");
}

}  // namespace tf_ring
