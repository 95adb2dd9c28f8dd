// Status: the one error type the engine hands back to framework adapters.
#ifndef TF_RING_COMMON_STATUS_H_
#define TF_RING_COMMON_STATUS_H_

#include <string>
#include <utility>

namespace tf_ring {

enum class StatusCode { kOk = 0, kInvalidArgument, kPrecondition, kAborted, kUnknown, kResourceExhausted,
                        kUnavailable };

class Status {
 public:
  Status() = default;
  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string msg) {
    return Status(StatusCode::kInvalidArgument, std::move(msg));
  }
  // Raised when the engine is not running (before init, after shutdown) and
  // when ranks disagree about a tensor.
  static Status Precondition(std::string msg) {
    return Status(StatusCode::kPrecondition, std::move(msg));
  }
  static Status Aborted(std::string msg) { return Status(StatusCode::kAborted, std::move(msg)); }
  static Status Unknown(std::string msg) { return Status(StatusCode::kUnknown, std::move(msg)); }
  // Some rank could not allocate what a collective needed (every rank raises it).
  static Status ResourceExhausted(std::string msg) {
    return Status(StatusCode::kResourceExhausted, std::move(msg));
  }

  // A rank of the job was lost (fault-tolerant mode, common/transport/peer_failure.h).
  static Status Unavailable(std::string msg) {
    return Status(StatusCode::kUnavailable, std::move(msg));
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // The same code with `prefix` put before the message.
  Status WithPrefix(const std::string& prefix) const { return Status(code_, prefix + message_); }

 private:
  Status(StatusCode code, std::string msg) : code_(code), message_(std::move(msg)) {}
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

}  // namespace tf_ring

#endif  // TF_RING_COMMON_STATUS_H_
