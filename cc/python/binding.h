// The Python binding's shared pieces: one Register function per job, and
// how an engine Status becomes a Python exception (whole message, right
// class). Built into tf_ring/_tf_ring.so (with the TensorFlow kernels) and
// into tf_ring_engine's module (without them).
#ifndef TF_RING_PYTHON_BINDING_H_
#define TF_RING_PYTHON_BINDING_H_

#include <pybind11/pybind11.h>

#include "common/base/status.h"

namespace tf_ring {
namespace python {

namespace py = pybind11;

// Raises ValueError (bad arguments, process set disagreements) or
// RuntimeError (everything else) carrying the Status's whole message.
enum class ErrorClass { kValue, kRuntime };
void RaiseIfError(const Status& s, ErrorClass error_class);

void RegisterLifecycle(py::module_& m);    // init, shutdown, topology
void RegisterProcessSets(py::module_& m);  // add, remove, query
void RegisterObservability(py::module_& m);  // stats, engine params, timeline
void RegisterCollectives(py::module_& m);  // engine-only collectives (tf_ring_engine)
void RegisterXlaHandlers(py::module_& m);  // the XLA handlers for jax.ffi (engine-only, with JAX)

}  // namespace python
}  // namespace tf_ring

#endif  // TF_RING_PYTHON_BINDING_H_
