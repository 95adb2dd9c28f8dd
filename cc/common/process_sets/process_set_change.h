// Adding or removing process sets is collective: every rank asks for the
// same change, the asks travel in one allgather on the global set, and each
// rank applies the change when that allgather completes, at the same point
// of the same cycle everywhere. Each rank's ask is [length, kind, body...]:
// kind 1 adds sets (body: count, then per set its size and ranks), kind 2
// removes one (body: its id), kind 3 adds sets under given ids (body: count,
// then per set its id, size and ranks, then the lowest id later sets may
// get): in-process recovery re-adds the sets a shrink kept under the ids
// traced functions hold, and never hands a dropped set's id to a new one.
#ifndef TF_RING_COMMON_PROCESS_SET_CHANGE_H_
#define TF_RING_COMMON_PROCESS_SET_CHANGE_H_

#include <cstdint>
#include <vector>

#include "common/base/status.h"

namespace tf_ring {

struct ProcessSetChange {
  enum Kind : int64_t { kAdd = 1, kRemove = 2, kAddAt = 3 };
  Kind kind = kAdd;
  std::vector<std::vector<int>> sets;  // kAdd, kAddAt
  std::vector<int32_t> ids;            // kAddAt: one per set
  int32_t next_id = 1;                 // kAddAt: later sets get this id or more
  int32_t remove_id = -1;              // kRemove
};

std::vector<int64_t> EncodeProcessSetChange(const ProcessSetChange& change);

// Reads every rank's ask from the allgathered `data` (rank order) and
// returns the one change they all asked for. Fails, identically on every
// rank, when ranks asked for different changes or a set's ranks are empty,
// repeated, unsorted or outside 0..size-1.
Status AgreedProcessSetChange(const std::vector<int64_t>& data, int size, ProcessSetChange* out);

}  // namespace tf_ring

#endif  // TF_RING_COMMON_PROCESS_SET_CHANGE_H_
