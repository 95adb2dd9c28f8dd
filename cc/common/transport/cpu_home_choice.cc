#include "common/transport/cpu_home_choice.h"

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

}  // namespace tf_ring
