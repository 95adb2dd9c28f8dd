// LRU cache of past single-tensor responses, identical on every rank.
//
// Every rank applies the same Put/Touch/Erase calls in the same order (they
// are driven by agreed response lists and agreed bit vectors), so a slot
// index ("bit") means the same tensor everywhere. Each rank stores its own
// request as the signature: a new request with the same name hits only if
// it matches what this rank asked last time.
#ifndef TF_RING_COMMON_RESPONSE_CACHE_H_
#define TF_RING_COMMON_RESPONSE_CACHE_H_

#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/base/message.h"

namespace tf_ring {

class ResponseCache {
 public:
  enum class Lookup { kMiss, kHit, kInvalid };

  explicit ResponseCache(size_t capacity) : slots_(capacity) {}

  size_t capacity() const { return slots_.size(); }
  // kHit: same name and same request; kInvalid: same name, different request.
  Lookup Find(const Request& request, uint32_t* bit) const;
  // Caches `response` (one tensor, no error) with this rank's `request`,
  // evicting the least recently used entry when full.
  void Put(const Response& response, const Request& request);
  const Response& Get(uint32_t bit) const { return slots_[bit].response; }
  void Touch(uint32_t bit) { slots_[bit].last_use = ++clock_; }
  void Erase(uint32_t bit);
  void EraseName(const std::string& name);
  size_t size() const { return by_name_.size(); }

  // The job cycles through more names than the cache holds (a loop's
  // iterations count as names of their own): a quarter of a capacity's
  // worth of names came back after being evicted, so every round misses.
  bool thrashing() const { return returns_ >= slots_.size() / 4 + 1; }
  // More slots (new ones free, at the end); forgets the thrashing. Every
  // rank sees the same Puts, so every rank grows at the same one.
  void Grow(size_t capacity);

 private:
  struct Slot {
    bool used = false;
    uint64_t last_use = 0;
    Response response;
    Request request;
  };
  std::vector<Slot> slots_;
  std::unordered_map<std::string, uint32_t> by_name_;
  uint64_t clock_ = 0;
  // Names evicted lately (at most a capacity's worth), and how many of them
  // came back: only Put, on the negotiation path, touches these.
  std::unordered_set<std::string> evicted_;
  std::deque<std::string> evicted_order_;
  size_t returns_ = 0;
};

// True when two requests from one rank ask for the same collective.
bool SameRequest(const Request& a, const Request& b);

}  // namespace tf_ring

#endif  // TF_RING_COMMON_RESPONSE_CACHE_H_
