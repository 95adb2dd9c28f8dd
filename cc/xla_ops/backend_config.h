// The backend_config string an XLA kernel attaches to its custom call, and
// the FFI handler parses back. XLA treats it as opaque bytes, so the format
// is ours: "key=value" pairs joined by ';', values percent-escaped so that
// tensor names holding ';', '=' or '%' survive the round trip.
#ifndef TF_RING_XLA_OPS_BACKEND_CONFIG_H_
#define TF_RING_XLA_OPS_BACKEND_CONFIG_H_

#include <map>
#include <string>

namespace tf_ring {
namespace xla_ops {

// Ordered so that encoding is deterministic: equal configs give equal HLO,
// which keeps XLA's compilation cache effective.
using BackendConfig = std::map<std::string, std::string>;

std::string EncodeBackendConfig(const BackendConfig& config);

// Returns false and sets *error (naming the bad part) on malformed input.
bool DecodeBackendConfig(const std::string& text, BackendConfig* config, std::string* error);

}  // namespace xla_ops
}  // namespace tf_ring

#endif  // TF_RING_XLA_OPS_BACKEND_CONFIG_H_
