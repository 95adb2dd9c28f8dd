#include "common/negotiation/caller_wait.h"

#include <sched.h>

#include <cstdlib>
#include <string>

#include "common/observability/logging.h"

namespace tf_ring {

namespace {

// A lone 4 KB allreduce finishes 5-10 us after its submit on 2 ranks here;
// 50 us covers a slow peer several times over.
constexpr int64_t kDefaultWaitMicros = 50;

// The CPUs the calling thread may run on (init() runs on the user's thread,
// whose affinity the engine thread inherits).
int AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
}

}  // namespace

int64_t CallerWaitMicros(int local_size) {
  const char* value = std::getenv("TF_RING_EAGER_WAIT_US");
  if (value != nullptr && *value != '\0') {
    char* end = nullptr;
    const long long parsed = std::strtoll(value, &end, 10);
    if (end != value && *end == '\0' && parsed >= 0) return static_cast<int64_t>(parsed);
    Log(LogLevel::kWarning, std::string("TF_RING_EAGER_WAIT_US=\"") + value +
                                "\" is not a whole number of microseconds; using the default.");
  }
  // Oversubscribed, a waiting caller would take turns from a rank with work.
  // Not measured to hurt (3 ranks on 2 cores: medians of 140-390 us either
  // way), so this is caution; setting the variable overrides it.
  return local_size > AllowedCpus() ? 0 : kDefaultWaitMicros;
}

}  // namespace tf_ring
