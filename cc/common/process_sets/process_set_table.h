// The process sets besides the global one, by id. Framework threads submit
// into a set's queue through here; the background thread applies additions
// and removals (at a point every rank agreed on, see process_set_change.h)
// and runs the cycles of the sets this rank belongs to.
#ifndef TF_RING_COMMON_PROCESS_SET_TABLE_H_
#define TF_RING_COMMON_PROCESS_SET_TABLE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "common/process_sets/process_set.h"

namespace tf_ring {

class ProcessSetTable {
 public:
  // Queues collectives of set `id` (all or nothing). Fails with a message
  // naming the tensor, the set and this rank when the set is unknown or
  // this rank is not a member. Translates broadcast roots to set ranks.
  Status Submit(int32_t id, std::vector<TensorEntry> entries, std::vector<Request> requests);
  // The set's ranks; false when there is no set `id` (id 0 is not here).
  bool Ranks(int32_t id, std::vector<int>* ranks);
  std::vector<int32_t> Ids();

  // Background thread. Adds sets with the next ids in order (connecting
  // those this rank belongs to) and returns their ids. With `at_ids` (one
  // per set) the sets get those ids instead, and equal ranks are allowed:
  // in-process recovery restores sets a shrink may have made equal, under
  // the ids traced functions hold; later sets get `next_id` or more.
  Status Add(const std::vector<std::vector<int>>& sets, const std::vector<int32_t>& at_ids,
             int32_t next_id, int my_rank, MPI_Comm world, const ProcessSetOptions& options,
             std::vector<int32_t>* ids);
  // Background thread. Removes set `id`; its pending collectives fail.
  Status Remove(int32_t id);
  // Sets this rank belongs to, ascending by id: the cycle order on every rank.
  std::vector<std::shared_ptr<ProcessSet>> Mine();
  // Background thread at shutdown: closes every set, returns pending entries.
  std::vector<TensorEntry> CloseAll();

  size_t entries_in_flight();
  // Counters of set `id`; null when unknown.
  std::shared_ptr<ProcessSet> Find(int32_t id);
  void ResetStats();

 private:
  std::mutex mu_;
  std::map<int32_t, std::shared_ptr<ProcessSet>> sets_;
  int32_t next_id_ = 1;
};

}  // namespace tf_ring

#endif  // TF_RING_COMMON_PROCESS_SET_TABLE_H_
