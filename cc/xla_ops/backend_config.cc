#include "xla_ops/backend_config.h"

#include <cstdio>

namespace tf_ring {
namespace xla_ops {
namespace {

// '"' and '\\' too: the encoded text travels inside an MLIR string attribute.
bool NeedsEscape(char c) {
  return c == ';' || c == '=' || c == '%' || c == '"' || c == '\\' || c < 0x20 || c == 0x7f;
}

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (NeedsEscape(c)) {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", static_cast<unsigned char>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

bool Unescape(const std::string& s, std::string* out) {
  out->clear();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      *out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) return false;  // a truncated %XX escape
    int hi = HexValue(s[i + 1]), lo = HexValue(s[i + 2]);
    if (hi < 0 || lo < 0) return false;
    *out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return true;
}

}  // namespace

std::string EncodeBackendConfig(const BackendConfig& config) {
  std::string out;
  for (const auto& kv : config) {
    if (!out.empty()) out += ';';
    out += Escape(kv.first) + "=" + Escape(kv.second);
  }
  return out;
}

bool DecodeBackendConfig(const std::string& text, BackendConfig* config, std::string* error) {
  config->clear();
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(';', start);
    if (end == std::string::npos) end = text.size();
    std::string part = text.substr(start, end - start);
    size_t eq = part.find('=');
    std::string key, value;
    if (eq == std::string::npos || !Unescape(part.substr(0, eq), &key) ||
        !Unescape(part.substr(eq + 1), &value)) {
      *error = "tf_ring: malformed XLA backend_config entry '" + part + "' in '" + text +
               "' (expected key=value with %XX escapes)";
      return false;
    }
    (*config)[key] = value;
    start = end + 1;
  }
  return true;
}

}  // namespace xla_ops
}  // namespace tf_ring
