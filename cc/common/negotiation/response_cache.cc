#include "common/negotiation/response_cache.h"

namespace tf_ring {

bool SameRequest(const Request& a, const Request& b) {
  return a.op == b.op && a.reduce_op == b.reduce_op && a.dtype == b.dtype && a.shape == b.shape &&
         a.root_rank == b.root_rank && a.prescale == b.prescale && a.postscale == b.postscale &&
         a.splits == b.splits && a.device == b.device && a.name == b.name &&
         a.static_shape == b.static_shape;
}

ResponseCache::Lookup ResponseCache::Find(const Request& request, uint32_t* bit) const {
  auto it = by_name_.find(request.name);
  if (it == by_name_.end()) return Lookup::kMiss;
  *bit = it->second;
  return SameRequest(slots_[it->second].request, request) ? Lookup::kHit : Lookup::kInvalid;
}

void ResponseCache::Put(const Response& response, const Request& request) {
  if (slots_.empty()) return;
  uint32_t bit;
  auto it = by_name_.find(request.name);
  if (it != by_name_.end()) {
    bit = it->second;
  } else {
    // First free slot, else the least recently used one; deterministic.
    bit = 0;
    bool found_free = false;
    for (uint32_t i = 0; i < slots_.size(); ++i) {
      if (!slots_[i].used) {
        bit = i;
        found_free = true;
        break;
      }
      if (slots_[i].last_use < slots_[bit].last_use) bit = i;
    }
    if (!found_free) {
      const std::string& gone = slots_[bit].request.name;
      by_name_.erase(gone);
      if (evicted_.insert(gone).second) evicted_order_.push_back(gone);
      if (evicted_order_.size() > slots_.size()) {
        evicted_.erase(evicted_order_.front());
        evicted_order_.pop_front();
      }
    }
    if (evicted_.erase(request.name)) ++returns_;
    by_name_[request.name] = bit;
  }
  Slot& slot = slots_[bit];
  slot.used = true;
  slot.response = response;
  slot.request = request;
  slot.last_use = ++clock_;
}

void ResponseCache::Erase(uint32_t bit) {
  Slot& slot = slots_[bit];
  if (!slot.used) return;
  by_name_.erase(slot.request.name);
  slot = Slot();
}

void ResponseCache::Grow(size_t capacity) {
  if (capacity > slots_.size()) slots_.resize(capacity);
  evicted_.clear();
  evicted_order_.clear();
  returns_ = 0;
}

void ResponseCache::EraseName(const std::string& name) {
  auto it = by_name_.find(name);
  if (it != by_name_.end()) Erase(it->second);
}

}  // namespace tf_ring
