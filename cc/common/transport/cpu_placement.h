// Keeping the local ranks' engine threads on CPUs of their own for the
// length of a large shared-memory allreduce.
//
// Such an allreduce hands data between the local ranks' engine threads
// dozens of times (two barriers a chunk), and a waiting thread sleeps on a
// futex after a short spin (peer_wait.h). The kernel may wake a sleeper on
// its waker's CPU while the other CPU is busy, and two threads that take
// turns then stay stacked on one CPU: each runs only once the other gives
// the CPU up, every hand-off costs a spin and a wake-up, and the load
// balancer sees one runnable thread and never separates them. On the 2-core
// VM that made about one 160-gradient step in eight 2-3x slower, and its
// cache probe unsure (benchmarks/README.md, "Engine threads kept apart").
//
// Kept only for the allreduce, then free again: a thread held on one CPU
// for good waits out whole time slices whenever another process shares that
// CPU, which took a lone 4 KB op from 0.3 to 3.7 ms with one core kept busy.
// Kept only where the local ranks roam the same CPUs (a launcher that binds
// them to cores has kept them apart already) and each can have one.
// TF_RING_ENGINE_AFFINITY=0 turns it off.
#ifndef TF_RING_COMMON_TRANSPORT_CPU_PLACEMENT_H_
#define TF_RING_COMMON_TRANSPORT_CPU_PLACEMENT_H_

#include <mpi.h>
#include <sched.h>

#include "common/transport/cpu_home_choice.h"

namespace tf_ring {

// The local ranks' CPUs (LocalCpus). Collective over `local_comm`.
LocalCpus GatherLocalCpus(MPI_Comm local_comm);

// Keeps the calling thread on home.cpu while it lives (nothing when -1),
// then lets it roam its mask again.
class KeptOnHomeCpu {
 public:
  explicit KeptOnHomeCpu(const CpuHome& home);
  ~KeptOnHomeCpu();
  KeptOnHomeCpu(const KeptOnHomeCpu&) = delete;
  KeptOnHomeCpu& operator=(const KeptOnHomeCpu&) = delete;
  bool kept() const { return kept_; }  // false: home.cpu was -1, or the kernel refused

 private:
  const CpuHome& home_;
  bool kept_ = false;
};

}  // namespace tf_ring

#endif  // TF_RING_COMMON_TRANSPORT_CPU_PLACEMENT_H_
