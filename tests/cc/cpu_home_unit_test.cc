// Unit tests of the CPU-home choice (cc/common/transport/cpu_home_choice.h):
// which CPU each local rank's engine thread keeps to during a large
// shared-memory allreduce, and when none. Built with g++ alone by
// tests/builds/test_engine_unit.py.
#include <sched.h>
#include <stdlib.h>

#include <initializer_list>
#include <string>

#include "common/transport/cpu_home_choice.h"
#include "unit_check.h"

using namespace tf_ring;

static cpu_set_t Set(std::initializer_list<int> cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus) CPU_SET(cpu, &set);
  return set;
}

// Local ranks that all roam `cpus` (the launcher bound none of them).
static LocalCpus Roaming(std::initializer_list<int> cpus) {
  LocalCpus out;
  out.all = out.mine = Set(cpus);
  out.count = CPU_COUNT(&out.all);
  return out;
}

static int Home(const LocalCpus& cpus, int local_rank, int local_size, std::string* why) {
  CpuHome home = ChooseCpuHome(cpus, local_rank, local_size, why);
  CHECK(CPU_EQUAL(&home.roam, &cpus.mine));  // it returns to its own mask afterwards
  return home.cpu;
}

static void EveryLocalRankGetsACpuOfItsOwn() {
  std::string why;
  CHECK(Home(Roaming({0, 1}), 0, 2, &why) == 0 && why == "CPU 0");
  CHECK(Home(Roaming({0, 1}), 1, 2, &why) == 1 && why == "CPU 1");
  // The union's CPUs in order, gaps skipped (a cgroup's cpuset).
  const LocalCpus sparse = Roaming({2, 5, 7, 9});
  CHECK(Home(sparse, 0, 3, &why) == 2);
  CHECK(Home(sparse, 1, 3, &why) == 5);
  CHECK(Home(sparse, 2, 3, &why) == 7 && why == "CPU 7");
}

static void NoHomeWhereItWouldHurt() {
  std::string why;
  CHECK(Home(Roaming({0, 1}), 0, 1, &why) == -1 && why == "no other local rank");
  CHECK(Home(Roaming({0, 1}), 2, 3, &why) == -1 && why == "3 local ranks on 2 CPUs");
  CHECK(Home(Roaming({0, 1}), 0, 3, &why) == -1);  // every rank alike: none is kept
  LocalCpus bound = Roaming({0, 1, 2, 3});
  bound.mine = Set({1});  // the launcher bound this rank to CPU 1
  CHECK(Home(bound, 1, 4, &why) == -1 && Contains(why, "bound to CPUs of their own"));
}

static void TurnedOffByTheSetting() {
  std::string why;
  for (const char* off : {"0", "off"}) {
    setenv("TF_RING_ENGINE_AFFINITY", off, 1);
    CHECK(Home(Roaming({0, 1}), 1, 2, &why) == -1 && why == "TF_RING_ENGINE_AFFINITY=0");
  }
  setenv("TF_RING_ENGINE_AFFINITY", "1", 1);
  CHECK(Home(Roaming({0, 1}), 1, 2, &why) == 1);
  unsetenv("TF_RING_ENGINE_AFFINITY");
}

int main() {
  unsetenv("TF_RING_ENGINE_AFFINITY");
  EveryLocalRankGetsACpuOfItsOwn();
  NoHomeWhereItWouldHurt();
  TurnedOffByTheSetting();
  return Summary();
}
