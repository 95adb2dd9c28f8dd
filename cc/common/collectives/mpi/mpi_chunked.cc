#include <climits>

#include "common/collectives/collectives.h"

namespace tf_ring {

namespace {
constexpr int64_t kMaxChunkElements = 1LL << 30;
}

int MpiAllreduceLarge(void* buf, int64_t count, MPI_Datatype type, size_t elem_size, MPI_Op op,
                      MPI_Comm comm) {
  char* p = static_cast<char*>(buf);
  for (int64_t done = 0; done < count;) {
    int n = static_cast<int>(std::min(kMaxChunkElements, count - done));
    int rc = MPI_Allreduce(MPI_IN_PLACE, p + done * elem_size, n, type, op, comm);
    if (rc != MPI_SUCCESS) return rc;
    done += n;
  }
  return MPI_SUCCESS;
}

int MpiBcastLarge(void* buf, int64_t bytes, int root, MPI_Comm comm) {
  char* p = static_cast<char*>(buf);
  for (int64_t done = 0; done < bytes;) {
    int n = static_cast<int>(std::min(kMaxChunkElements, bytes - done));
    int rc = MPI_Bcast(p + done, n, MPI_BYTE, root, comm);
    if (rc != MPI_SUCCESS) return rc;
    done += n;
  }
  return MPI_SUCCESS;
}

}  // namespace tf_ring
