#include "common/transport/cross_memory.h"

#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

namespace tf_ring {

namespace {

constexpr uint64_t kProbeMagic = 0x74665f72696e6721ull;

// A cursor over an iovec list that can consume any number of bytes.
struct IovCursor {
  const std::vector<iovec>* list;
  size_t index = 0;
  size_t offset = 0;

  bool done() const { return index >= list->size(); }
  // Up to `max` entries starting at the cursor, the first one trimmed.
  void Window(size_t max, std::vector<iovec>* out) const {
    out->clear();
    for (size_t i = index; i < list->size() && out->size() < max; ++i) {
      iovec v = (*list)[i];
      if (i == index) {
        v.iov_base = static_cast<char*>(v.iov_base) + offset;
        v.iov_len -= offset;
      }
      out->push_back(v);
    }
  }
  void Advance(size_t bytes) {
    while (bytes > 0 && !done()) {
      const size_t left = (*list)[index].iov_len - offset;
      if (bytes < left) {
        offset += bytes;
        return;
      }
      bytes -= left;
      ++index;
      offset = 0;
    }
    while (!done() && (*list)[index].iov_len == offset) {  // skip empty entries
      ++index;
      offset = 0;
    }
  }
};

size_t Bytes(const std::vector<iovec>& v) {
  size_t n = 0;
  for (const iovec& x : v) n += x.iov_len;
  return n;
}

}  // namespace

bool ProbeCrossMemory(MPI_Comm local_comm, bool wanted, std::vector<pid_t>* pids) {
  int rank = 0, size = 1;
  MPI_Comm_rank(local_comm, &rank);
  MPI_Comm_size(local_comm, &size);
  // Every rank publishes its pid and the address of a known value; each then
  // reads every peer's value. The closing allreduce also keeps each value
  // alive until every peer has read it.
  volatile uint64_t value = kProbeMagic ^ static_cast<uint64_t>(rank);
  int64_t mine[2] = {static_cast<int64_t>(getpid()),
                     static_cast<int64_t>(reinterpret_cast<uintptr_t>(&value))};
  std::vector<int64_t> all(2 * size);
  MPI_Allgather(mine, 2, MPI_INT64_T, all.data(), 2, MPI_INT64_T, local_comm);
  int ok = wanted ? 1 : 0;
  for (int q = 0; q < size && ok; ++q) {
    if (q == rank) continue;
    uint64_t read = 0;
    iovec local{&read, sizeof(read)};
    iovec remote{reinterpret_cast<void*>(static_cast<uintptr_t>(all[2 * q + 1])), sizeof(read)};
    const ssize_t got = process_vm_readv(static_cast<pid_t>(all[2 * q]), &local, 1, &remote, 1, 0);
    ok = got == static_cast<ssize_t>(sizeof(read)) && read == (kProbeMagic ^ static_cast<uint64_t>(q));
  }
  int everyone = 0;
  MPI_Allreduce(&ok, &everyone, 1, MPI_INT, MPI_MIN, local_comm);
  pids->clear();
  if (!everyone) return false;
  for (int q = 0; q < size; ++q) pids->push_back(static_cast<pid_t>(all[2 * q]));
  return true;
}

Status ReadPeerMemory(pid_t pid, const std::vector<iovec>& local, const std::vector<iovec>& remote) {
  if (Bytes(local) != Bytes(remote)) return Status::Unknown("cross-memory read: ranges differ in size");
  IovCursor l{&local}, r{&remote};
  l.Advance(0);
  r.Advance(0);
  std::vector<iovec> lw, rw;
  while (!l.done() && !r.done()) {
    l.Window(IOV_MAX, &lw);
    r.Window(IOV_MAX, &rw);
    const ssize_t got = process_vm_readv(pid, lw.data(), lw.size(), rw.data(), rw.size(), 0);
    if (got <= 0) {
      if (got < 0 && errno == EINTR) continue;
      return Status::Unknown(std::string("reading local rank memory (pid ") + std::to_string(pid) +
                             ") failed: " + (got < 0 ? std::strerror(errno) : "no progress") +
                             "; TF_RING_SHM_SINGLE_COPY=0 stages through shared memory instead");
    }
    l.Advance(static_cast<size_t>(got));
    r.Advance(static_cast<size_t>(got));
  }
  return Status::OK();
}

}  // namespace tf_ring
