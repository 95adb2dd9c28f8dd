// The engine's state behind Engine::impl_, shared by engine.cc (lifecycle
// and the loop) and engine_process_sets.cc. Private to the engine.
#ifndef TF_RING_COMMON_ENGINE_IMPL_H_
#define TF_RING_COMMON_ENGINE_IMPL_H_

#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>

#include "common/observability/autotune.h"
#include "common/negotiation/controller.h"
#include "common/engine.h"
#include "common/transport/host_layout.h"
#include "common/transport/mpi_context.h"
#include "common/operation_manager.h"
#include "common/process_sets/process_set_table.h"
#include "common/transport/shm_segment.h"
#include "common/negotiation/tensor_queue.h"
#include "common/observability/timeline.h"

namespace tf_ring {

struct Engine::Impl {
  // Timeline: when each of this rank's tensors entered a cycle.
  std::unordered_map<std::string, Timeline::Clock::time_point> negotiation_start;

  void RecordNegotiations(const ResponseList& responses, Timeline* timeline, int64_t cycle,
                          Timeline::Clock::time_point cycle_start) {
    const auto agreed = Timeline::Clock::now();
    if (!responses.responses.empty()) timeline->CycleMark(cycle, cycle_start);
    for (const Response& resp : responses.responses) {
      for (const std::string& name : resp.names) {
        auto it = negotiation_start.find(name);
        if (it == negotiation_start.end()) continue;  // a tensor this rank never held
        Timeline::Args args;
        args.via = resp.from_cache ? "cache" : "coordinator";
        args.arrived = resp.arrived;
        args.waited_for = resp.waited_for;
        timeline->Phase(name, "NEGOTIATE", it->second, agreed, std::move(args));
        negotiation_start.erase(it);
      }
    }
  }

  MpiContext mpi;
  HostLayout hosts;
  ShmSegment shm;
  TensorQueue queue;
  ProcessSetTable sets;  // the others; this Impl is the global set
  size_t cache_capacity = 0;
  double stall_check_seconds = 0;
  ProcessSetOptions set_options;  // the engine's settings, for every process set
  std::unique_ptr<Controller> controller;
  std::unique_ptr<OperationManager> operations;
  std::chrono::microseconds batch_window{0};
  int64_t fusion_threshold = 0;
  std::unique_ptr<Autotuner> tuner;  // rank 0 with autotune on
  int64_t cycle = 0;                 // cycles run; identical on every rank
};

}  // namespace tf_ring

#endif  // TF_RING_COMMON_ENGINE_IMPL_H_
