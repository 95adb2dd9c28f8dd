// Where an array's bytes are, for the engine-only collectives: host arrays
// through the buffer protocol (NumPy), CUDA arrays through DLPack
// (__dlpack__, from PyTorch or CuPy). No pointers travel as Python ints.
#ifndef TF_RING_PYTHON_ARRAY_VIEW_H_
#define TF_RING_PYTHON_ARRAY_VIEW_H_

#include <cstdint>
#include <vector>

#include "python/binding.h"

namespace tf_ring {
namespace python {

struct ArrayView {
  void* data = nullptr;
  std::vector<int64_t> shape;
  int device = -1;  // -1: host memory; else the CUDA device ordinal
};

// A C-contiguous host array; `writable` for outputs. Raises ValueError
// (not contiguous, read-only where written) or TypeError (no buffer).
ArrayView HostArray(py::handle array, bool writable);
// A compact CUDA array through __dlpack__(stream=1): the producer orders its
// work before the legacy default stream, which the engine waits on. Also
// takes a "dltensor" capsule, whose producer must be on that stream already.
ArrayView DeviceArray(py::handle array);

}  // namespace python
}  // namespace tf_ring

#endif  // TF_RING_PYTHON_ARRAY_VIEW_H_
