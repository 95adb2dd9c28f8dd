#include "common/observability/logging.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace tf_ring {

namespace {
int g_rank = -1;

LogLevel ThresholdFromEnv() {
  const char* v = std::getenv("TF_RING_LOG_LEVEL");
  if (!v) return LogLevel::kWarning;
  if (!strcasecmp(v, "trace")) return LogLevel::kTrace;
  if (!strcasecmp(v, "debug")) return LogLevel::kDebug;
  if (!strcasecmp(v, "info")) return LogLevel::kInfo;
  if (!strcasecmp(v, "error")) return LogLevel::kError;
  return LogLevel::kWarning;
}

const char* LevelName(LogLevel level) {
  static const char* names[] = {"TRACE", "DEBUG", "INFO", "WARNING", "ERROR"};
  return names[static_cast<int>(level)];
}
}  // namespace

void SetLogRank(int rank) { g_rank = rank; }

bool LogEnabled(LogLevel level) {
  static const LogLevel threshold = ThresholdFromEnv();
  return level >= threshold;
}

void Log(LogLevel level, const std::string& message) {
  if (LogEnabled(level)) LogAlways(level, message);
}

void LogAlways(LogLevel level, const std::string& message) {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  int ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%H:%M:%S", std::localtime(&t));
  std::fprintf(stderr, "[%s.%03d tf_ring rank %d %s] %s\n", stamp, ms, g_rank, LevelName(level),
               message.c_str());
}

}  // namespace tf_ring
