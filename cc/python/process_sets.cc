// Process sets: adding and removing (collective, so the GIL is released
// while every rank arrives) and what is registered.
#include <cstdint>
#include <vector>

#include "common/engine.h"
#include "python/binding.h"

#include <pybind11/stl.h>

namespace tf_ring {
namespace python {

namespace {

std::vector<int32_t> AddProcessSets(const std::vector<std::vector<int>>& sets) {
  std::vector<int32_t> ids;
  Status s;
  {
    py::gil_scoped_release release;
    s = Engine::Get().AddProcessSets(sets, &ids);
  }
  RaiseIfError(s, ErrorClass::kValue);
  return ids;
}

void RestoreProcessSets(const std::vector<std::vector<int>>& sets, const std::vector<int32_t>& ids,
                        int32_t next_id) {
  Status s;
  {
    py::gil_scoped_release release;
    s = Engine::Get().RestoreProcessSets(sets, ids, next_id);
  }
  RaiseIfError(s, ErrorClass::kValue);
}

void RemoveProcessSet(int32_t id) {
  Status s;
  {
    py::gil_scoped_release release;
    s = Engine::Get().RemoveProcessSet(id);
  }
  RaiseIfError(s, ErrorClass::kValue);
}

py::object ProcessSetRanks(int32_t id) {
  std::vector<int> ranks;
  if (!Engine::Get().ProcessSetRanks(id, &ranks)) return py::none();
  return py::cast(ranks);
}

}  // namespace

void RegisterProcessSets(py::module_& m) {
  m.def("add_process_sets", &AddProcessSets, py::arg("sets"),
        "Registers the sets (lists of ranks) on every rank; returns their ids. ValueError when "
        "the ranks disagree or a set is invalid.");
  m.def("restore_process_sets", &RestoreProcessSets, py::arg("sets"), py::arg("ids"),
        py::arg("next_id"),
        "Registers the sets under the given ids on every rank (in-process recovery); later "
        "sets get next_id or more.");
  m.def("remove_process_set", &RemoveProcessSet, py::arg("id"));
  m.def("process_set_ranks", &ProcessSetRanks, py::arg("id"), "Ranks of set `id`, or None.");
  m.def("process_set_ids", [] { return Engine::Get().ProcessSetIds(); },
        "Ids of the registered sets besides 0, ascending.");
}

}  // namespace python
}  // namespace tf_ring
