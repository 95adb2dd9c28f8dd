// C entry points for process sets (ctypes, from tf_ring/process_sets.py).
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/c_api/c_api_message.h"
#include "common/engine.h"

using tf_ring::CopyMessage;
using tf_ring::Engine;

extern "C" {

// `flat` holds the sets as [count, size_1, ranks_1..., size_2, ...]. Blocks
// until every rank asked for the same sets; writes their ids into `ids`.
// Returns the number of ids, or -1 with the reason in `error`.
int tf_ring_add_process_sets(const int* flat, int n, int32_t* ids, int max_ids, char* error, int error_len) {
  std::vector<std::vector<int>> sets;
  int at = 1;
  for (int s = 0; n > 0 && s < flat[0] && at < n; ++s) {
    const int len = flat[at++];
    sets.emplace_back(flat + at, flat + at + len);
    at += len;
  }
  std::vector<int32_t> out;
  tf_ring::Status st = Engine::Get().AddProcessSets(sets, &out);
  if (!st.ok()) {
    CopyMessage(st.message(), error, error_len);
    return -1;
  }
  int count = 0;
  for (; count < max_ids && count < static_cast<int>(out.size()); ++count) ids[count] = out[count];
  return count;
}

// Returns 0, or 1 with the reason in `error`.
int tf_ring_remove_process_set(int32_t id, char* error, int error_len) {
  tf_ring::Status st = Engine::Get().RemoveProcessSet(id);
  if (!st.ok()) CopyMessage(st.message(), error, error_len);
  return st.ok() ? 0 : 1;
}

// Writes up to `max` ranks of set `id`; returns how many it has, or -1 when
// there is no such set.
int tf_ring_process_set_ranks(int32_t id, int* out, int max) {
  std::vector<int> ranks;
  if (!Engine::Get().ProcessSetRanks(id, &ranks)) return -1;
  for (int i = 0; i < max && i < static_cast<int>(ranks.size()); ++i) out[i] = ranks[i];
  return static_cast<int>(ranks.size());
}

// Ids of the registered sets besides 0; returns how many there are.
int tf_ring_process_set_ids(int32_t* out, int max) {
  std::vector<int32_t> ids = Engine::Get().ProcessSetIds();
  for (int i = 0; i < max && i < static_cast<int>(ids.size()); ++i) out[i] = ids[i];
  return static_cast<int>(ids.size());
}

// Counters of set `id` in tf_ring_stats' order; -1 when there is no such set.
int tf_ring_process_set_stats(int32_t id, int64_t* out, int n) {
  int64_t values[tf_ring::kStatCount];
  if (!Engine::Get().ProcessSetStats(id, values)) return -1;
  const int count = n < tf_ring::kStatCount ? n : tf_ring::kStatCount;
  std::memcpy(out, values, sizeof(int64_t) * count);
  return count;
}

}  // extern "C"
