// Whether a process on this host is still running, for ranks that wait on
// each other through shared memory: no MPI call there tells them a peer
// died, so a waiter checks for itself.
#ifndef TF_RING_COMMON_TRANSPORT_PROCESS_LIVENESS_H_
#define TF_RING_COMMON_TRANSPORT_PROCESS_LIVENESS_H_

#include <sys/types.h>

#include <cstdint>

namespace tf_ring {

// A process named by its pid and its start time (clock ticks since boot),
// so a reused pid, or the same number seen from another pid namespace, is
// not mistaken for it.
struct ProcessIdentity {
  pid_t pid = 0;
  uint64_t start_ticks = 0;
};

ProcessIdentity ThisProcess();

enum class Liveness { kAlive, kGone, kUnknown };
// kGone: no such process, a different one under that pid, or a zombie.
// kUnknown: /proc cannot say (not mounted, or the process is hidden).
Liveness CheckLiveness(const ProcessIdentity& process);

}  // namespace tf_ring

#endif  // TF_RING_COMMON_TRANSPORT_PROCESS_LIVENESS_H_
