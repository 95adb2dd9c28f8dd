// C entry points for Python (ctypes). They live in the same shared library as
// the TensorFlow kernels, so both see the one Engine of this process.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/c_api/c_api_message.h"
#include "common/engine.h"
#include "common/transport/mpi_context.h"

using tf_ring::CopyMessage;
using tf_ring::Engine;

extern "C" {

// Returns 0 on success; otherwise writes the reason into `error`.
int tf_ring_init(const void* mpi_comm, char* error, int error_len) {
  tf_ring::Status s = Engine::Get().Init(mpi_comm);
  if (!s.ok()) CopyMessage(s.message(), error, error_len);
  return s.ok() ? 0 : 1;
}

void tf_ring_shutdown() { Engine::Get().Shutdown(); }

// At interpreter exit. MPI_Finalize waits for every rank, so a rank that left
// the job early (sys.exit mid-training) cannot exit before the ranks whose
// collectives its leaving failed; those then linger a moment after
// finalizing, so the early rank's exit code is the one mpirun reports first.
void tf_ring_finalize_mpi() {
  Engine::Get().Shutdown();
  tf_ring::MpiContext::FinalizeIfOwned();
  if (Engine::Get().failed_by_peer()) std::this_thread::sleep_for(std::chrono::seconds(1));
}

int tf_ring_is_initialized() { return Engine::Get().running() ? 1 : 0; }

// Fills rank, size, local_rank, local_size, cross_rank, cross_size, homogeneous.
int tf_ring_topology(int* out) {
  if (!Engine::Get().started()) return 1;
  tf_ring::Topology t = Engine::Get().topology();
  int values[7] = {t.rank,       t.size,       t.local_rank,           t.local_size,
                   t.cross_rank, t.cross_size, t.homogeneous ? 1 : 0};
  std::memcpy(out, values, sizeof(values));
  return 0;
}

// Counter order: cycles, negotiations, cache_hits, cache_misses,
// fused_batches, tensors, bytes, hierarchical_batches, then scratch_bytes
// (the scratch memory held now, not a counter).
int tf_ring_stats(int64_t* out, int n) {
  int64_t values[tf_ring::kStatCount];
  Engine::Get().ProcessSetStats(0, values);
  int count = n < tf_ring::kStatCount ? n : tf_ring::kStatCount;
  std::memcpy(out, values, sizeof(int64_t) * count);
  return count;
}

void tf_ring_reset_stats() { Engine::Get().ResetStats(); }

// Returns 0 on success; otherwise writes the reason into `error`.
int tf_ring_start_timeline(const char* path, int mark_cycles, char* error, int error_len) {
  tf_ring::Status s = Engine::Get().StartTimeline(path ? path : "", mark_cycles != 0);
  if (!s.ok()) CopyMessage(s.message(), error, error_len);
  return s.ok() ? 0 : 1;
}

void tf_ring_stop_timeline() { Engine::Get().StopTimeline(); }

// Fills fusion threshold (bytes), cycle time (us), autotune state (0 off,
// 1 tuning, 2 settled) and the number of parameter changes so far.
void tf_ring_engine_params(int64_t* out) {
  tf_ring::EngineParams p = Engine::Get().params();
  out[0] = p.fusion_threshold;
  out[1] = p.cycle_time_us;
  out[2] = static_cast<int64_t>(Engine::Get().autotune_state());
  out[3] = static_cast<int64_t>(Engine::Get().param_history().size());
}

// Writes up to `max` changes as (cycle, fusion threshold, cycle time us)
// triples; returns how many it wrote.
int tf_ring_param_history(int64_t* out, int max) {
  std::vector<Engine::ParamChange> h = Engine::Get().param_history();
  int n = 0;
  for (; n < max && n < static_cast<int>(h.size()); ++n) {
    out[3 * n] = h[n].cycle;
    out[3 * n + 1] = h[n].params.fusion_threshold;
    out[3 * n + 2] = h[n].params.cycle_time_us;
  }
  return n;
}

// Copies rank 0's engine settings (Engine::agreed_settings: NUL-separated
// "NAME=value" or "NAME") into `out` when they fit; returns their length.
int tf_ring_agreed_settings(char* out, int max) {
  const std::string text = Engine::Get().agreed_settings();
  if (out && static_cast<int>(text.size()) <= max) std::memcpy(out, text.data(), text.size());
  return static_cast<int>(text.size());
}

}  // extern "C"
