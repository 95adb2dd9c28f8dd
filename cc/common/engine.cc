#include "common/engine.h"

#include <chrono>
#include <cstdlib>

#include "common/controller.h"
#include "common/logging.h"
#include "common/mpi_context.h"
#include "common/mpi_types.h"
#include "common/operation_manager.h"
#include "common/tensor_queue.h"

namespace tf_ring {

namespace {
// How long an idle rank sleeps before joining a cycle anyway, so that ranks
// with work (or a shutdown) never wait on a rank that has none for longer.
constexpr std::chrono::microseconds kIdleWake(2000);

double EnvDouble(const char* name, double fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atof(v) : fallback;
}
}  // namespace

struct Engine::Impl {
  MpiContext mpi;
  TensorQueue queue;
  std::unique_ptr<Controller> controller;
  std::unique_ptr<OperationManager> operations;
  std::chrono::microseconds batch_window{0};
};

Engine& Engine::Get() {
  static Engine* engine = new Engine();  // never destroyed: outlives static teardown
  return *engine;
}

Status Engine::Init(const void* mpi_comm) {
  std::lock_guard<std::mutex> lock(lifecycle_mu_);
  if (running_) return Status::OK();
  if (thread_.joinable()) thread_.join();

  auto impl = std::make_unique<Impl>();
  Status s = impl->mpi.Init(static_cast<const MPI_Comm*>(mpi_comm));
  if (!s.ok()) return s;
  impl->controller = std::make_unique<Controller>(&impl->mpi);
  impl->operations = std::make_unique<OperationManager>(&impl->mpi);
  impl->batch_window = std::chrono::microseconds(
      static_cast<int64_t>(EnvDouble("TF_RING_CYCLE_TIME", 0.0) * 1000.0));
  CreateCustomMpiOps();

  const MpiContext& m = impl->mpi;
  topology_ = Topology{m.rank(), m.size(), m.local_rank(), m.local_size(), m.cross_rank(), m.cross_size()};
  SetLogRank(m.rank());
  if (m.thread_level() < MPI_THREAD_MULTIPLE) {
    Log(LogLevel::kWarning, "MPI provides thread level " + std::to_string(m.thread_level()) +
                                ", not MPI_THREAD_MULTIPLE; do not call MPI from other threads "
                                "while tf_ring runs.");
  }
  impl_ = std::move(impl);
  ResetStats();
  shutdown_requested_ = false;
  {
    std::lock_guard<std::mutex> accept(accept_mu_);
    accepting_ = true;
    was_shut_down_ = false;
  }
  running_ = true;
  thread_ = std::thread(&Engine::Loop, this);
  return Status::OK();
}

void Engine::Shutdown() {
  std::lock_guard<std::mutex> lock(lifecycle_mu_);
  if (!thread_.joinable()) return;
  shutdown_requested_ = true;
  impl_->queue.Wake();
  thread_.join();
  impl_->mpi.Release();
  FreeCustomMpiOps();
  impl_.reset();
  running_ = false;
  std::lock_guard<std::mutex> accept(accept_mu_);
  was_shut_down_ = true;
}

Status Engine::Enqueue(TensorEntry entry, Request request) {
  std::lock_guard<std::mutex> lock(accept_mu_);
  if (!accepting_) {
    return Status::Precondition(
        was_shut_down_
            ? "tf_ring has been shut down; no more collectives can run in this process."
            : "tf_ring is not initialized: call tf_ring.init() before any collective.");
  }
  request.rank = topology_.rank;
  return impl_->queue.Add(std::move(entry), std::move(request));
}

Status Engine::EnqueueGroup(std::vector<TensorEntry> entries, std::vector<Request> requests) {
  std::lock_guard<std::mutex> lock(accept_mu_);
  if (!accepting_) {
    return Status::Precondition(
        was_shut_down_
            ? "tf_ring has been shut down; no more collectives can run in this process."
            : "tf_ring is not initialized: call tf_ring.init() before any collective.");
  }
  for (auto& r : requests) r.rank = topology_.rank;
  return impl_->queue.AddGroup(std::move(entries), std::move(requests));
}

void Engine::ResetStats() {
  for (auto* c : {&stats_.cycles, &stats_.negotiations, &stats_.cache_hits, &stats_.cache_misses,
                  &stats_.fused_batches, &stats_.tensors, &stats_.bytes}) {
    c->store(0);
  }
}

void Engine::Loop() {
  Impl& s = *impl_;
  Status failure;
  for (;;) {
    s.queue.WaitForWork(kIdleWake);
    s.queue.WaitForBurstEnd(s.batch_window);

    RequestList mine;
    mine.requests = s.queue.TakeRequests();
    mine.shutdown = shutdown_requested_.load();

    ResponseList responses;
    Status st = s.controller->Negotiate(mine, &responses);
    stats_.cycles++;
    stats_.negotiations++;
    if (!st.ok()) {
      Log(LogLevel::kError, st.message());
      failure = st;
    }
    for (const Response& resp : responses.responses) {
      stats_.bytes += s.operations->Execute(resp, &s.queue);
      stats_.tensors += static_cast<int64_t>(resp.names.size());
      if (resp.names.size() > 1) stats_.fused_batches++;
    }
    if (responses.shutdown) break;
  }

  {
    std::lock_guard<std::mutex> lock(accept_mu_);
    accepting_ = false;
  }
  Status closing = failure.ok()
                       ? Status::Aborted("tf_ring was shut down (on this or another rank) "
                                         "before this collective could run.")
                       : failure;
  for (TensorEntry& e : s.queue.TakeAllEntries()) e.done(closing);
}

}  // namespace tf_ring
