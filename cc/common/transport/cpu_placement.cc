#include "common/transport/cpu_placement.h"

#include <cstring>

namespace tf_ring {

LocalCpus GatherLocalCpus(MPI_Comm local_comm) {
  LocalCpus out;
  CPU_ZERO(&out.mine);
  if (sched_getaffinity(0, sizeof(out.mine), &out.mine) != 0) CPU_ZERO(&out.mine);
  constexpr int kWords = sizeof(cpu_set_t) / sizeof(unsigned long);
  unsigned long words[kWords];
  std::memcpy(words, &out.mine, sizeof(words));
  MPI_Allreduce(MPI_IN_PLACE, words, kWords, MPI_UNSIGNED_LONG, MPI_BOR, local_comm);
  std::memcpy(&out.all, words, sizeof(words));
  out.count = CPU_COUNT(&out.all);
  return out;
}

KeptOnHomeCpu::KeptOnHomeCpu(const CpuHome& home) : home_(home) {
  if (home_.cpu < 0) return;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(home_.cpu, &one);
  // 0: the calling thread. Moves it there at once if it runs elsewhere.
  kept_ = sched_setaffinity(0, sizeof(one), &one) == 0;
}

KeptOnHomeCpu::~KeptOnHomeCpu() {
  if (kept_) sched_setaffinity(0, sizeof(home_.roam), &home_.roam);
}

}  // namespace tf_ring
