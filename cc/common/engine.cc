#include "common/engine.h"
#include "common/engine_impl.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <unordered_map>

#include "common/negotiation/agreed_settings.h"
#include "common/negotiation/caller_wait.h"
#include "common/negotiation/controller.h"
#include "common/negotiation/fusion.h"
#include "common/transport/hierarchical_choice.h"
#include "common/transport/host_layout.h"
#include "common/observability/logging.h"
#include "common/observability/stage_probe.h"
#include "common/transport/mpi_context.h"
#include "common/transport/mpi_types.h"
#include "common/transport/peer_failure.h"
#include "common/operation_manager.h"
#include "common/process_sets/process_set_table.h"
#include "common/transport/shm_segment.h"
#include "common/negotiation/tensor_queue.h"

namespace tf_ring {

namespace {
// How long an idle rank sleeps before joining a cycle anyway, so that ranks
// with work (or a shutdown) never wait on a rank that has none for longer.
constexpr std::chrono::microseconds kIdleWake(2000);
// After a cycle that took work, the next op is likely close behind (a
// training loop's next step, a lone op's caller coming back): poll this long
// before sleeping. Tens of microseconds, yielding all along (tensor_queue.cc),
// so a rank sharing its cores with TensorFlow does not starve it.
constexpr std::chrono::microseconds kSpinAfterWork(50);

// Chosen by measurement (benchmarks/README.md, "Chunks that do not
// bounce"): large enough that a staged line has left the peer's caches
// before it is staged again, which matters when ranks sit on different
// L3s; small enough that two buffers of every local rank fit one L3. Across
// hosts each chunk is also one network round per rank, and fewer, larger
// rounds measured 3-4x faster on simulated hosts.
constexpr double kDefaultShmChunkBytes = 4 << 20;
// Where a host's /dev/shm cannot hold the default (Docker's is 64 MB).
constexpr double kFallbackShmChunkBytes = 1 << 20;

// Every rank runs with rank 0's settings (see agreed_settings.h): rank 0's
// texts go to every rank on the engine's communicator, and a rank whose own
// differ says which, once per variable, before using rank 0's.
Status AgreeSettings(const MpiContext& mpi, EngineSettings* settings, std::string* described) {
  const SettingTexts mine = ReadSettingTexts();
  std::vector<char> bytes = SerializeSettingTexts(mine);
  int length = static_cast<int>(bytes.size());
  if (MPI_Bcast(&length, 1, MPI_INT, 0, mpi.comm()) != MPI_SUCCESS) {
    return Status::Unknown("MPI_Bcast of rank 0's engine settings failed");
  }
  bytes.resize(static_cast<size_t>(length));
  if (MPI_Bcast(bytes.data(), length, MPI_BYTE, 0, mpi.comm()) != MPI_SUCCESS) {
    return Status::Unknown("MPI_Bcast of rank 0's engine settings failed");
  }
  SettingTexts rank0;
  // Only another build could fail to read them: rank 0 learns of it too, so
  // no rank goes on into the next collective alone.
  int readable = ParseSettingTexts(bytes.data(), bytes.size(), &rank0) ? 1 : 0;
  if (MPI_Allreduce(MPI_IN_PLACE, &readable, 1, MPI_INT, MPI_MIN, mpi.comm()) != MPI_SUCCESS) {
    return Status::Unknown("MPI_Allreduce of the engine settings check failed");
  }
  if (!readable) {
    return Status::Unknown("some rank could not read rank 0's engine settings; are all ranks "
                           "running the same tf_ring build?");
  }
  if (mpi.rank() != 0) {
    for (const std::string& warning : SettingDifferences(mine, rank0)) {
      Log(LogLevel::kWarning, warning);
    }
  }
  *described = DescribeSettingTexts(rank0);
  Status s = ParseSettings(rank0, settings);
  // Every rank parses rank 0's texts, so every rank fails here together.
  if (!s.ok() && mpi.rank() != 0) return s.WithPrefix("rank 0's setting: ");
  return s;
}
}  // namespace

namespace {
// Who stopped the engine when it stopped without an error, so that a rank
// whose peer exited says which peer: "on this rank", "by rank 1, which ...".
std::string StoppedBy(const std::vector<int32_t>& by_ranks, int my_rank) {
  std::string others;
  for (int32_t r : by_ranks) {
    if (r == my_rank) return "on this rank";
    others += (others.empty() ? "" : ", ") + std::to_string(r);
  }
  if (others.empty()) return "on this or another rank";
  return std::string("by rank") + (by_ranks.size() > 1 ? "s " : " ") + others +
         ", which called shutdown() or is exiting";
}
}  // namespace

Engine& Engine::Get() {
  static Engine* engine = new Engine();  // never destroyed: outlives static teardown
  return *engine;
}

Status Engine::Init(const void* mpi_comm) {
  std::lock_guard<std::mutex> lock(lifecycle_mu_);
  if (running_ && accepting()) return Status::OK();
  // The loop may have ended because another rank shut down: clean up and
  // start afresh, as that rank's own init() expects.
  StopLocked();

  auto impl = std::make_unique<Impl>();
  ClearPeerLoss();  // a new engine, on a communicator of the ranks left
  Status s = impl->mpi.Init(static_cast<const MPI_Comm*>(mpi_comm));
  if (!s.ok()) return s;
  SetLogRank(impl->mpi.rank());  // the warnings below name their rank
  EngineSettings settings;
  std::string settings_text;
  s = AgreeSettings(impl->mpi, &settings, &settings_text);
  if (!s.ok()) return s;
  impl->cache_capacity = settings.cache_capacity;
  impl->stall_check_seconds = settings.stall_check_seconds;
  impl->fusion_threshold = settings.fusion_threshold;
  impl->set_options.cache_capacity = impl->cache_capacity;
  // Unless set by the user, the cache grows up to 4x when the names do not fit.
  impl->set_options.cache_limit = settings.cache_capacity_set ? 0 : 4 * impl->cache_capacity;
  impl->set_options.stall_check_seconds = impl->stall_check_seconds;
  impl->set_options.stall_shutdown_seconds = settings.stall_shutdown_seconds;
  impl->set_options.crossed_wait_seconds = settings.crossed_wait_seconds;
  impl->controller = impl->set_options.MakeController(&impl->mpi);
  if (settings.shm) {
    impl->set_options.shm_single_copy = settings.shm_single_copy;
    const bool chunk_set = settings.shm_chunk_bytes >= 0;
    impl->set_options.shm_area_bytes =
        static_cast<size_t>(chunk_set ? settings.shm_chunk_bytes : kDefaultShmChunkBytes);
    impl->set_options.shm_fallback_bytes = chunk_set ? 0 : static_cast<size_t>(kFallbackShmChunkBytes);
    impl->set_options.shm_shared_cache_chunk_bytes = chunk_set ? 0 : ShmSegment::kSharedCacheChunkBytes;
  }
  impl->set_options.hierarchical = settings.hierarchical;
  HostCounts host_counts;
  host_counts.shm_allowed = settings.shm;
  s = impl->hosts.Init(impl->mpi, &host_counts);
  if (!s.ok()) return s;
  const HierarchicalMode hierarchical_mode = settings.hierarchical;
  HierarchicalChoice hierarchy = ChooseHierarchical(hierarchical_mode, host_counts);
  // One node shares memory among all ranks; hierarchical shares it per host.
  ShmSegment* shm = nullptr;
  const bool one_node = impl->mpi.local_size() == impl->mpi.size();
  if ((one_node && host_counts.shm_allowed) || hierarchy.hierarchical) {
    s = impl->shm.InitEverywhere(impl->mpi.comm(), impl->mpi.local_comm(),
                                 impl->set_options.shm_area_bytes,
                                 impl->set_options.shm_fallback_bytes, settings.shm_single_copy,
                                 impl->mpi.rank());
    if (!s.ok()) return s;
    impl->shm.AllowSharedCacheChunks(impl->mpi.local_comm(), impl->set_options.shm_shared_cache_chunk_bytes);
    shm = &impl->shm;
  }
  if (FaultTolerantMode() && !ShmSegment::WatchedEverywhere(impl->mpi.comm(), shm)) {
    // A rank waiting in shared memory must be able to tell a dead peer from
    // a slow one, or a lost rank would hang it; every rank decides alike.
    if (impl->mpi.rank() == 0) {
      Log(LogLevel::kWarning, "fault-tolerant mode: some local ranks' processes are not visible "
                              "to each other in /proc (separate pid namespaces?), so a dead one "
                              "could not be told from a slow one; using MPI inside hosts.");
    }
    impl->shm.Release();
    shm = nullptr;
    hierarchy.hierarchical = false;
  }
  if (shm != nullptr && one_node) impl->controller->RoundOverSharedMemory(shm);
  impl->operations = std::make_unique<OperationManager>(
      &impl->mpi, shm, hierarchy.hierarchical ? &impl->hosts : nullptr, &timeline_);
  impl->batch_window = std::chrono::microseconds(settings.cycle_time_us);
  const EngineParams initial{impl->fusion_threshold, impl->batch_window.count()};
  const bool autotune = settings.autotune;
  if (autotune && impl->mpi.rank() == 0) {
    impl->tuner = std::make_unique<Autotuner>(initial, settings.autotune_config);
    // Every rank switches to the first trial together, after cycle 1.
    impl->controller->ProposeParams(impl->tuner->first(), false);
  }
  {
    std::lock_guard<std::mutex> params_lock(params_mu_);
    params_ = initial;
    autotune_state_ = autotune ? AutotuneState::kTuning : AutotuneState::kOff;
    param_history_.clear();
    settings_text_ = std::move(settings_text);
  }
  CreateCustomMpiOps();

  const MpiContext& m = impl->mpi;
  topology_ = Topology{m.rank(),       m.size(),       m.local_rank(),  m.local_size(),
                       m.cross_rank(), m.cross_size(), m.homogeneous()};
  caller_wait_us_ = CallerWaitMicros(m.local_size());
  if (m.thread_level() < MPI_THREAD_MULTIPLE) {
    Log(LogLevel::kWarning, "MPI provides thread level " + std::to_string(m.thread_level()) +
                                ", not MPI_THREAD_MULTIPLE; do not call MPI from other threads "
                                "while tf_ring runs.");
  }
  if (!settings.timeline_path.empty() && m.rank() == 0) {
    s = timeline_.Start(settings.timeline_path, settings.timeline_mark_cycles);
    if (!s.ok()) Log(LogLevel::kError, s.message() + "; continuing without a timeline.");
  }
  if (m.rank() == 0 && (host_counts.hosts > 1 || hierarchical_mode == HierarchicalMode::kOn)) {
    Log(LogLevel::kInfo, hierarchy.why);
  }
  if (LogEnabled(LogLevel::kInfo)) {
    Log(LogLevel::kInfo, "engine started: rank " + std::to_string(m.rank()) + " of " +
                             std::to_string(m.size()) + ", local " + std::to_string(m.local_rank()) +
                             " of " + std::to_string(m.local_size()) + ", allreduce over " +
                             (hierarchy.hierarchical ? "shared memory within hosts, MPI across" : shm ? "shared memory" : "MPI") + ", fusion threshold " +
                             std::to_string(impl->fusion_threshold) + " bytes, cycle time " +
                             std::to_string(impl->batch_window.count()) + " us" +
                             (autotune ? " (autotune on)" : ""));
  }
  impl_ = std::move(impl);
  ResetStats();
  shutdown_requested_ = false;
  failed_by_peer_ = false;
  {
    std::lock_guard<std::mutex> accept(accept_mu_);
    accepting_ = true;
    was_shut_down_ = false;
    stop_reason_.clear();
  }
  running_ = true;
  thread_ = std::thread(&Engine::Loop, this);
  return Status::OK();
}

void Engine::Shutdown() {
  std::lock_guard<std::mutex> lock(lifecycle_mu_);
  StopLocked();
}

bool Engine::accepting() {
  std::lock_guard<std::mutex> lock(accept_mu_);
  return accepting_;
}

void Engine::StopLocked() {
  if (!thread_.joinable()) return;
  shutdown_requested_ = true;
  impl_->queue.Wake();
  thread_.join();
  timeline_.Stop();
  impl_->mpi.Release();
  FreeCustomMpiOps();
  impl_.reset();
  running_ = false;
  std::lock_guard<std::mutex> accept(accept_mu_);
  was_shut_down_ = true;
}

Status Engine::NotAccepting() const {
  // Stopped for a lost rank: the same error as the collectives in flight
  // got, so elastic training recovers from this one too.
  if (PeerLost()) return PeerLostStatus();
  if (!was_shut_down_ && !running_) {
    return Status::Precondition("tf_ring is not initialized: call tf_ring.init() before any collective.");
  }
  return Status::Precondition("tf_ring has been shut down" +
                              (stop_reason_.empty() ? std::string() : " (" + stop_reason_ + ")") +
                              "; call tf_ring.init() to start a new engine before more collectives.");
}

Status Engine::Enqueue(TensorEntry entry, Request request, int32_t process_set) {
  std::lock_guard<std::mutex> lock(accept_mu_);
  if (!accepting_) {
    return NotAccepting();
  }
  if (process_set != 0) {
    std::vector<TensorEntry> entries;
    entries.push_back(std::move(entry));
    Status s = impl_->sets.Submit(process_set, std::move(entries), {std::move(request)});
    if (s.ok()) impl_->queue.Wake();  // the loop serves every set
    return s;
  }
  request.rank = topology_.rank;
  return impl_->queue.Add(std::move(entry), std::move(request));
}

Status Engine::EnqueueGroup(std::vector<TensorEntry> entries, std::vector<Request> requests,
                            int32_t process_set) {
  std::lock_guard<std::mutex> lock(accept_mu_);
  if (!accepting_) {
    return NotAccepting();
  }
  if (process_set != 0) {
    Status s = impl_->sets.Submit(process_set, std::move(entries), std::move(requests));
    if (s.ok()) impl_->queue.Wake();
    return s;
  }
  for (auto& r : requests) r.rank = topology_.rank;
  return impl_->queue.AddGroup(std::move(entries), std::move(requests));
}

Status Engine::StartTimeline(const std::string& path, bool mark_cycles) {
  std::lock_guard<std::mutex> lock(lifecycle_mu_);
  if (!running_) {
    return Status::Precondition("tf_ring is not initialized: call tf_ring.init() before "
                                "start_timeline().");
  }
  if (topology_.rank != 0) return Status::OK();
  return timeline_.Start(path, mark_cycles);
}

void Engine::StopTimeline() { timeline_.Stop(); }

EngineParams Engine::params() {
  std::lock_guard<std::mutex> lock(params_mu_);
  return params_;
}

std::string Engine::agreed_settings() {
  std::lock_guard<std::mutex> lock(params_mu_);
  return settings_text_;
}

Engine::AutotuneState Engine::autotune_state() {
  std::lock_guard<std::mutex> lock(params_mu_);
  return autotune_state_;
}

std::vector<Engine::ParamChange> Engine::param_history() {
  std::lock_guard<std::mutex> lock(params_mu_);
  return param_history_;
}

void Engine::ResetStats() {
  if (impl_) impl_->sets.ResetStats();
  ResetCounters(&stats_);
}

void Engine::ApplyParams(const ResponseList& agreed) {
  Impl& s = *impl_;
  s.fusion_threshold = agreed.fusion_threshold;
  s.batch_window = std::chrono::microseconds(agreed.cycle_time_us);
  const EngineParams now{agreed.fusion_threshold, agreed.cycle_time_us};
  Log(LogLevel::kDebug, "engine parameters from cycle " + std::to_string(s.cycle) +
                            ": fusion threshold " + std::to_string(now.fusion_threshold) +
                            " bytes, cycle time " + std::to_string(now.cycle_time_us) + " us");
  std::lock_guard<std::mutex> lock(params_mu_);
  params_ = now;
  param_history_.push_back(ParamChange{s.cycle, now});
  if (agreed.params_settled) autotune_state_ = AutotuneState::kSettled;
}

void Engine::Loop() {
  Impl& s = *impl_;
  Status failure;
  bool joined_here = false;  // this rank called join() and waits for the others
  std::string stopped_by = StoppedBy({}, topology_.rank);
  bool by_peer = false;  // stopped by another rank's shutdown, not this one's
  bool took_work = false;  // the last cycle took requests: spin before sleeping
  bool set_stalled = false;  // a process set's stall shutdown: stop everyone next cycle
  for (;;) {
    // With collectives in flight, go straight to the next cycle: the peers
    // we wait on arrive within it. Only a rank with nothing pending idles;
    // a joined rank waiting for the others counts as idle.
    const size_t busy_above = joined_here ? 1 : 0;
    const size_t in_flight = s.queue.entries_in_flight() + s.sets.entries_in_flight();
    s.queue.WaitForWork(in_flight > busy_above ? std::chrono::microseconds(0) : kIdleWake,
                        took_work ? kSpinAfterWork : std::chrono::microseconds(0));
    s.queue.WaitForBurstEnd(s.batch_window);

    const auto cycle_start = Timeline::Clock::now();
    std::vector<Request> requests = s.queue.TakeRequests();
    took_work = !requests.empty();
    if (took_work) StageProbe::Stamp(kProbeTaken);
    const bool recording = timeline_.active();
    if (!recording) s.negotiation_start.clear();
    for (const Request& r : requests) {
      joined_here = joined_here || r.op == OpType::kJoin;
      if (recording) {
        timeline_.Phase(r.name, "QUEUE", r.enqueued_at, cycle_start);
        s.negotiation_start[r.name] = cycle_start;
      }
    }
    ResponseList responses;
    CycleCounts counts;
    // Which process sets have work on some rank: bit id % 64 of the OR, so
    // a set nobody uses costs no round on its communicator. Every member
    // reads the same OR, so all of them skip a set or none do.
    uint64_t busy_sets = 0;
    for (auto& set : s.sets.Mine()) {
      if (set->queue().entries_in_flight() > 0) busy_sets |= 1ULL << (set->id() % 64);
    }
    // A set's stall shutdown (failure set below) stops every rank through
    // this cycle's shutdown flag, as a local shutdown() would.
    Status st = s.controller->RunCycle(std::move(requests), shutdown_requested_.load() || set_stalled,
                                       &responses, &counts, &busy_sets);
    if (!responses.responses.empty()) StageProbe::Stamp(kProbeAgreed);
    stats_.cycles++;
    stats_.negotiations += counts.negotiations;
    stats_.cache_hits += counts.cache_hits;
    stats_.cache_misses += counts.cache_misses;
    if (!st.ok()) {
      Log(LogLevel::kError, st.message());
      failure = st;
    }
    if (PeerLost()) {
      failure = PeerLostStatus();
      break;  // nothing was agreed; every survivor stops the same way
    }
    if (recording) s.RecordNegotiations(responses, &timeline_, stats_.cycles.load(), cycle_start);
    std::vector<Response> batches = FuseResponses(
        std::move(responses.responses), s.fusion_threshold,
        [&s](const Response& r) { return ResponsePayloadBytes(r, &s.queue, s.mpi.size()); });
    // Autotune scores the bytes every set this rank belongs to moved, so a
    // job whose traffic runs in process sets is tuned on that traffic.
    const std::vector<std::shared_ptr<ProcessSet>> my_sets =
        s.tuner ? s.sets.Mine() : std::vector<std::shared_ptr<ProcessSet>>();
    auto sets_bytes = [&my_sets]() {
      int64_t total = 0;
      for (const auto& set : my_sets) total += set->stats().bytes.load();
      return total;
    };
    const int64_t bytes_before = stats_.bytes.load() + (s.tuner ? sets_bytes() : 0);
    for (const Response& resp : batches) {
      if (LogEnabled(LogLevel::kTrace)) {
        std::string names;
        for (size_t i = 0; i < resp.names.size() && i < 8; ++i) names += (i ? ", " : "") + resp.names[i];
        if (resp.names.size() > 8) names += ", ...";
        Log(LogLevel::kTrace, std::string("cycle ") + std::to_string(s.cycle) + ": " +
                                  OpTypeName(resp.op) + " of " + std::to_string(resp.names.size()) +
                                  " tensor(s)" + (resp.is_error() ? " (error)" : "") + ": " + names);
      }
      if (resp.op == OpType::kJoin) {
        joined_here = false;
        Log(LogLevel::kInfo, "every rank has joined; rank " + std::to_string(resp.root_rank) +
                                 " joined last");
      }
      s.operations->Execute(resp, &s.queue, &stats_, s.fusion_threshold);
    }
    // Then every other set this rank belongs to, in ascending id order on
    // every rank, so collectives on different communicators cannot deadlock.
    // A set added or removed above takes effect here, on every rank alike.
    if (!responses.shutdown) {
      for (auto& set : s.sets.Mine()) {
        if (!(busy_sets & (1ULL << (set->id() % 64)))) continue;
        const std::string stalled = set->RunCycle(s.fusion_threshold);
        if (!stalled.empty() && !set_stalled) {
          Log(LogLevel::kError, stalled);
          failure = Status::Aborted(stalled);
          set_stalled = true;
        }
      }
    }
    if (PeerLost()) {
      failure = PeerLostStatus();  // a collective above met the lost rank
      break;
    }
    ++s.cycle;
    if (responses.has_params) ApplyParams(responses);
    const int64_t moved =
        s.tuner ? std::max<int64_t>(0, stats_.bytes.load() + sets_bytes() - bytes_before) : 0;
    if (s.tuner && (!batches.empty() || moved > 0)) {
      EngineParams next;
      if (s.tuner->Observe(moved, Timeline::Clock::now(), &next)) {
        s.controller->ProposeParams(next, s.tuner->settled());
        if (s.tuner->settled()) LogAlways(LogLevel::kInfo, s.tuner->Summary());
      }
    }
    if (responses.shutdown) {
      if (!responses.shutdown_reason.empty()) {
        Log(LogLevel::kError, responses.shutdown_reason);
        failure = Status::Aborted(responses.shutdown_reason);
      }
      stopped_by = StoppedBy(responses.shutdown_ranks, topology_.rank);
      by_peer = !shutdown_requested_.load();
      break;
    }
  }

  {
    std::lock_guard<std::mutex> lock(accept_mu_);
    accepting_ = false;
    stop_reason_ = failure.ok() ? stopped_by : failure.message();
  }
  // Make sure every survivor leaves its calls on the old communicators:
  // a rank on another host may wait in a cross-host step of the
  // hierarchical path, a local one in the shared-memory segment.
  for (MPI_Comm c : {s.mpi.comm(), s.mpi.local_comm(), s.mpi.cross_comm()}) RevokeAfterPeerLoss(c);
  s.shm.Release(/*abort_waiters=*/PeerLost());
  Status closing = failure.ok() ? Status::Aborted("tf_ring was shut down " + stopped_by +
                                                  "; this collective could not run.")
                                : failure;
  // Device work in flight: finishes, or fails with the reason when the
  // engine stops for an error (peers may be gone, so nothing waits on them).
  s.operations->Stop(!failure.ok(), closing.message());
  std::vector<TensorEntry> pending = s.queue.TakeAllEntries();
  // Failed tensors count as finished ones (stats() `tensors`); counted
  // before they fail, as in Execute, so their callers see them counted.
  stats_.tensors += static_cast<int64_t>(pending.size());
  for (TensorEntry& e : s.sets.CloseAll()) pending.push_back(std::move(e));
  failed_by_peer_ = failure.ok() && by_peer && !pending.empty();
  for (TensorEntry& e : pending) e.done(closing);
}

}  // namespace tf_ring
