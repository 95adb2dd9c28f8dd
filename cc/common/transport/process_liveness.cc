#include "common/transport/process_liveness.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace tf_ring {

namespace {

// Reads the state letter and start time (fields 3 and 22) of /proc/<pid>/stat.
// The command name (field 2) may hold spaces and parentheses, so parsing
// starts after its last ')'.
bool ReadStat(pid_t pid, char* state, uint64_t* start_ticks, bool* missing) {
  *missing = false;
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) {
    *missing = errno == ENOENT;
    return false;
  }
  char text[1024];
  const size_t n = std::fread(text, 1, sizeof(text) - 1, f);
  std::fclose(f);
  text[n] = '\0';
  const char* after_name = std::strrchr(text, ')');
  if (after_name == nullptr) return false;
  unsigned long long start = 0;
  // After ") ": state, then fields 4..21 (18 numbers), then the start time.
  if (std::sscanf(after_name + 1,
                  " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
                  state, &start) != 2) {
    return false;
  }
  *start_ticks = start;
  return true;
}

}  // namespace

ProcessIdentity ThisProcess() {
  ProcessIdentity me;
  me.pid = getpid();
  char state = 0;
  bool missing = false;
  if (!ReadStat(me.pid, &state, &me.start_ticks, &missing)) me.start_ticks = 0;
  return me;
}

Liveness CheckLiveness(const ProcessIdentity& process) {
  if (process.pid <= 0 || process.start_ticks == 0) return Liveness::kUnknown;
  char state = 0;
  uint64_t start = 0;
  bool missing = false;
  if (!ReadStat(process.pid, &state, &start, &missing)) {
    return missing ? Liveness::kGone : Liveness::kUnknown;
  }
  if (start != process.start_ticks) return Liveness::kGone;  // the pid was reused
  if (state == 'Z' || state == 'X') return Liveness::kGone;  // dead, not yet reaped
  return Liveness::kAlive;
}

}  // namespace tf_ring
