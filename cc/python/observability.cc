// Counters, engine parameters (autotune, rank 0's settings) and the timeline.
#include <cstdint>
#include <string>

#include "common/engine.h"
#include "common/observability/stage_probe.h"
#include "python/binding.h"

namespace tf_ring {
namespace python {

namespace {

// In EngineStats' order (observability/stats.h); scratch_bytes is the
// scratch memory held now, not a counter.
const char* const kStatNames[kStatCount] = {
    "cycles", "negotiations", "cache_hits", "cache_misses", "fused_batches",
    "tensors", "bytes", "hierarchical_batches", "caller_finished", "shm_small_chunk_batches",
    "shm_single_copy_batches", "shm_kept_on_cpu_batches",
    "scratch_bytes"};

// Counters of the global set (None), or of set `id`; None when there is no such set.
py::object Stats(py::object id) {
  int64_t values[kStatCount];
  if (!Engine::Get().ProcessSetStats(id.is_none() ? 0 : id.cast<int32_t>(), values)) {
    return py::none();
  }
  py::dict d;
  for (int i = 0; i < kStatCount; ++i) d[kStatNames[i]] = values[i];
  return d;
}

// {variable: rank 0's value, or None where rank 0 left it unset}.
py::dict AgreedSettings() {
  const std::string text = Engine::Get().agreed_settings();
  py::dict settings;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\0', at);
    if (end == std::string::npos) end = text.size();
    const std::string entry = text.substr(at, end - at);
    at = end + 1;
    if (entry.empty()) continue;
    const size_t eq = entry.find('=');
    if (eq == std::string::npos) {
      settings[py::str(entry)] = py::none();
    } else {
      settings[py::str(entry.substr(0, eq))] = py::str(entry.substr(eq + 1));
    }
  }
  return settings;
}

py::dict EngineParamsDict() {
  const EngineParams p = Engine::Get().params();
  static const char* const kAutotune[3] = {"off", "tuning", "settled"};
  const int state = static_cast<int>(Engine::Get().autotune_state());
  py::list history;
  for (const Engine::ParamChange& c : Engine::Get().param_history()) {
    history.append(py::make_tuple(c.cycle, c.params.fusion_threshold, c.params.cycle_time_us / 1000.0));
  }
  py::dict d;
  d["fusion_threshold"] = p.fusion_threshold;
  d["cycle_time_ms"] = p.cycle_time_us / 1000.0;
  d["autotune"] = (state >= 0 && state < 3) ? kAutotune[state] : "unknown";
  d["history"] = history;
  d["settings"] = AgreedSettings();
  return d;
}

void StartTimeline(const std::string& path, bool mark_cycles) {
  RaiseIfError(Engine::Get().StartTimeline(path, mark_cycles), ErrorClass::kRuntime);
}

}  // namespace

void RegisterObservability(py::module_& m) {
  m.def("stats", &Stats, py::arg("process_set_id") = py::none());
  m.def("reset_stats", [] { Engine::Get().ResetStats(); });
  // For benchmarks/latency_stages.py: turn the stage stamps on (and clear
  // them), and read the last op's (submit, taken, agreed, done) in ns.
  m.def("stage_probe", [](bool on) {
    StageProbe::Clear();
    StageProbe::Enable(on);
  });
  m.def("stage_stamps", [] {
    return py::make_tuple(StageProbe::Read(kProbeSubmit), StageProbe::Read(kProbeTaken),
                          StageProbe::Read(kProbeAgreed), StageProbe::Read(kProbeDone));
  });
  m.def("agreed_settings", &AgreedSettings);
  m.def("engine_params", &EngineParamsDict,
        "fusion_threshold, cycle_time_ms, autotune, history of (cycle, fusion_threshold, "
        "cycle_time_ms), settings.");
  m.def("start_timeline", &StartTimeline, py::arg("path"), py::arg("mark_cycles") = false);
  m.def("stop_timeline", [] { Engine::Get().StopTimeline(); });
}

}  // namespace python
}  // namespace tf_ring
