// Little-endian byte writer/reader for the negotiation messages. The reader
// never trusts its input: a short or malformed buffer makes ok() false instead
// of reading past the end.
#ifndef TF_RING_COMMON_WIRE_H_
#define TF_RING_COMMON_WIRE_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace tf_ring {

class ByteWriter {
 public:
  template <typename T>
  void Put(T value) {
    const char* p = reinterpret_cast<const char*>(&value);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
  }
  void PutString(const std::string& s) {
    Put<uint32_t>(static_cast<uint32_t>(s.size()));
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  template <typename T>
  void PutVector(const std::vector<T>& v) {
    Put<uint32_t>(static_cast<uint32_t>(v.size()));
    for (const T& x : v) Put<T>(x);
  }
  std::vector<char>& bytes() { return bytes_; }

 private:
  std::vector<char> bytes_;
};

class ByteReader {
 public:
  ByteReader(const char* data, size_t size) : data_(data), size_(size) {}

  template <typename T>
  T Get() {
    T value{};
    if (!Need(sizeof(T))) return value;
    std::memcpy(&value, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }
  std::string GetString() {
    uint32_t n = Get<uint32_t>();
    if (!Need(n)) return std::string();
    std::string s(data_ + pos_, n);
    pos_ += n;
    return s;
  }
  template <typename T>
  std::vector<T> GetVector() {
    uint32_t n = Get<uint32_t>();
    std::vector<T> v;
    if (!Need(static_cast<size_t>(n) * sizeof(T))) return v;
    v.reserve(n);
    for (uint32_t i = 0; i < n; ++i) v.push_back(Get<T>());
    return v;
  }
  bool ok() const { return ok_; }
  bool at_end() const { return pos_ == size_; }

 private:
  bool Need(size_t n) {
    if (!ok_ || n > size_ - pos_) {
      ok_ = false;
      return false;
    }
    return true;
  }
  const char* data_;
  size_t size_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace tf_ring

#endif  // TF_RING_COMMON_WIRE_H_
