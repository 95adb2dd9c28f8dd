// Engine counters since init(), read by tf_ring.stats(). Updated before the
// ops they count complete, so a caller that saw an op finish sees it counted.
#ifndef TF_RING_COMMON_STATS_H_
#define TF_RING_COMMON_STATS_H_

#include <atomic>
#include <cstdint>

namespace tf_ring {

// How many values tf_ring_stats() reports (the fields below, in order).
constexpr int kStatCount = 13;

struct EngineStats {
  std::atomic<int64_t> cycles{0};
  std::atomic<int64_t> negotiations{0};
  std::atomic<int64_t> cache_hits{0};
  std::atomic<int64_t> cache_misses{0};
  std::atomic<int64_t> fused_batches{0};
  std::atomic<int64_t> tensors{0};
  std::atomic<int64_t> bytes{0};
  std::atomic<int64_t> hierarchical_batches{0};  // collectives that crossed hosts hierarchically
  // Small eager ops whose caller saw them finish while waiting and finished
  // them on its own thread (negotiation/caller_wait.h).
  std::atomic<int64_t> caller_finished{0};
  // Shared-memory allreduces that staged small chunks because the local
  // ranks' cores share a cache (transport/shm_cache_probe.cc).
  std::atomic<int64_t> shm_small_chunk_batches{0};
  // Shared-memory allreduces that read the peers' tensors directly
  // (collectives/shm/shm_single_copy_allreduce.h).
  std::atomic<int64_t> shm_single_copy_batches{0};
  // Shared-memory allreduces larger than one area whose engine thread kept
  // to a CPU of its own while it ran (transport/cpu_placement.h).
  std::atomic<int64_t> shm_kept_on_cpu_batches{0};
  // Not a counter: the collectives' scratch memory held now (reset leaves it).
  std::atomic<int64_t> scratch_bytes{0};
};

// Zeroes every counter (scratch_bytes is a level, not a counter: kept).
inline void ResetCounters(EngineStats* s) {
  for (auto* c : {&s->cycles, &s->negotiations, &s->cache_hits, &s->cache_misses, &s->fused_batches,
                  &s->tensors, &s->bytes, &s->hierarchical_batches, &s->caller_finished,
                  &s->shm_small_chunk_batches, &s->shm_single_copy_batches, &s->shm_kept_on_cpu_batches}) {
    c->store(0);
  }
}

}  // namespace tf_ring

#endif  // TF_RING_COMMON_STATS_H_
