// The Python module over the engine's control path. The module's name is
// set by the build: _tf_ring (in tf_ring/_tf_ring.so, beside TensorFlow's
// kernels, so the ops and init() share one engine) or _tf_ring_engine.
#include "python/binding.h"

#ifndef TF_RING_PY_MODULE
#define TF_RING_PY_MODULE _tf_ring
#endif

namespace tf_ring {
namespace python {

void RaiseIfError(const Status& s, ErrorClass error_class) {
  if (s.ok()) return;
  if (error_class == ErrorClass::kValue) throw py::value_error(s.message());
  throw std::runtime_error(s.message());  // pybind11 turns it into RuntimeError
}

}  // namespace python
}  // namespace tf_ring

PYBIND11_MODULE(TF_RING_PY_MODULE, m) {
  m.doc() = "tf_ring's engine: lifecycle, topology, process sets, stats, timeline, collectives";
  tf_ring::python::RegisterLifecycle(m);
  tf_ring::python::RegisterProcessSets(m);
  tf_ring::python::RegisterObservability(m);
  tf_ring::python::RegisterCollectives(m);
  tf_ring::python::RegisterXlaHandlers(m);
}
