#include "common/transport/cpu_placement.h"

#include <cstdlib>
#include <cstring>

namespace tf_ring {

namespace {
// "0" or "off": never keep the engine thread on a CPU.
bool PlacementTurnedOff() {
  const char* value = std::getenv("TF_RING_ENGINE_AFFINITY");
  if (value == nullptr) return false;
  return std::strcmp(value, "0") == 0 || std::strcmp(value, "off") == 0;
}
}  // namespace

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

CpuHome ChooseCpuHome(const LocalCpus& cpus, int local_rank, int local_size, std::string* why) {
  CpuHome home;
  home.roam = cpus.mine;
  if (PlacementTurnedOff()) {
    *why = "TF_RING_ENGINE_AFFINITY=0";
  } else if (local_size < 2) {
    *why = "no other local rank";
  } else if (!CPU_EQUAL(&cpus.mine, &cpus.all)) {
    *why = "the local ranks are bound to CPUs of their own already";
  } else if (local_size > cpus.count) {
    *why = std::to_string(local_size) + " local ranks on " + std::to_string(cpus.count) + " CPUs";
  } else {
    for (int cpu = 0, seen = 0; cpu < CPU_SETSIZE && home.cpu < 0; ++cpu) {
      if (CPU_ISSET(cpu, &cpus.all) && seen++ == local_rank) home.cpu = cpu;
    }
    *why = home.cpu >= 0 ? "CPU " + std::to_string(home.cpu) : "no CPU found";
  }
  return home;
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
