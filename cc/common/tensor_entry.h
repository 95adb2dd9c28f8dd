// What a framework adapter hands the engine for one collective: raw buffers,
// a way to allocate an output whose shape only the negotiation knows, and the
// callback that finishes the framework op. No framework types leak in here.
#ifndef TF_RING_COMMON_TENSOR_ENTRY_H_
#define TF_RING_COMMON_TENSOR_ENTRY_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/message.h"
#include "common/status.h"

namespace tf_ring {

struct TensorEntry {
  std::string name;
  OpType op = OpType::kAllreduce;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  const void* input = nullptr;
  // Preallocated output (allreduce, broadcast); null when the shape depends
  // on other ranks and `allocate_output` must be called.
  void* output = nullptr;
  // Output `index` with `shape`; returns its buffer through `data`.
  std::function<Status(int index, const std::vector<int64_t>& shape, void** data)> allocate_output;
  // Called exactly once, from the engine thread, when the collective is over.
  std::function<void(const Status&)> done;

  int64_t NumElements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  int64_t NumBytes() const { return NumElements() * static_cast<int64_t>(DataTypeSize(dtype)); }
};

}  // namespace tf_ring

#endif  // TF_RING_COMMON_TENSOR_ENTRY_H_
