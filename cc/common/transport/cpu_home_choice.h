// Which CPU each local rank's engine thread keeps to during a large
// shared-memory allreduce (cpu_placement.h says why): the choice alone, from
// the local ranks' CPU masks, free of MPI so that it is unit-tested with
// g++ alone (tests/cc/cpu_home_unit_test.cc).
#ifndef TF_RING_COMMON_TRANSPORT_CPU_HOME_CHOICE_H_
#define TF_RING_COMMON_TRANSPORT_CPU_HOME_CHOICE_H_

#include <sched.h>

#include <string>

namespace tf_ring {

// The CPUs the local ranks may run on: the union of their affinity masks
// (the same on every rank), and this rank's own mask.
struct LocalCpus {
  cpu_set_t all;
  cpu_set_t mine;
  int count = 0;
};

// Where this local rank's engine thread keeps to during a large allreduce,
// and the mask it returns to afterwards.
struct CpuHome {
  int cpu = -1;  // -1: nowhere in particular
  cpu_set_t roam{};
};

// The local_rank-th CPU of the union, so every local rank gets its own;
// cpu -1 where the ranks are bound, oversubscribed, alone, or it is turned
// off (TF_RING_ENGINE_AFFINITY=0 or off). `why` says which, for the log.
CpuHome ChooseCpuHome(const LocalCpus& cpus, int local_rank, int local_size, std::string* why);

}  // namespace tf_ring

#endif  // TF_RING_COMMON_TRANSPORT_CPU_HOME_CHOICE_H_
