// Error text handed back through the C entry points (ctypes): copied into the
// caller's buffer, truncated to fit and always NUL-terminated.
#ifndef TF_RING_COMMON_C_API_MESSAGE_H_
#define TF_RING_COMMON_C_API_MESSAGE_H_

#include <cstring>
#include <string>

namespace tf_ring {

inline void CopyMessage(const std::string& msg, char* out, int out_len) {
  if (!out || out_len <= 0) return;
  std::strncpy(out, msg.c_str(), out_len - 1);
  out[out_len - 1] = '\0';
}

}  // namespace tf_ring

#endif  // TF_RING_COMMON_C_API_MESSAGE_H_
