// Minimal leveled logging to stderr with time and rank, level from
// TF_RING_LOG_LEVEL (trace, debug, info, warning, error; default warning).
#ifndef TF_RING_COMMON_LOGGING_H_
#define TF_RING_COMMON_LOGGING_H_

#include <string>

namespace tf_ring {

enum class LogLevel { kTrace = 0, kDebug, kInfo, kWarning, kError };

void SetLogRank(int rank);
bool LogEnabled(LogLevel level);
void Log(LogLevel level, const std::string& message);
// Prints whatever the threshold: for the few lines a user asked for by
// turning a feature on (autotune's choice).
void LogAlways(LogLevel level, const std::string& message);

}  // namespace tf_ring

#endif  // TF_RING_COMMON_LOGGING_H_
