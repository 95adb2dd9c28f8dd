// What a framework adapter hands the engine for one collective: raw buffers,
// a way to allocate an output whose shape only the negotiation knows, and the
// callback that finishes the framework op. No framework types leak in here.
#ifndef TF_RING_COMMON_TENSOR_ENTRY_H_
#define TF_RING_COMMON_TENSOR_ENTRY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/base/dtype.h"
#include "common/base/message.h"
#include "common/base/status.h"

namespace tf_ring {

// TensorEntry::device of a tensor in host memory.
constexpr int kCpuDevice = -1;

// Runs a task on a framework's own threads (TensorFlow's executor runner).
using FrameworkScheduler = std::function<void(std::function<void()>)>;

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
  // Called exactly once when the collective is over: from the engine thread,
  // or for GPU tensors from the thread that watches the device.
  std::function<void(const Status&)> done;
  // Optional, host tensors: where the framework wants `done` called when
  // the collective completes normally. The entries of one batch that name
  // the same scheduler are finished by one task on it (a framework's
  // executor continues far faster on its own threads than on the engine's:
  // benchmarks/README.md). Must stay valid until `done` is called.
  const FrameworkScheduler* finish_on = nullptr;
  // kCpuDevice, or the CUDA device ordinal that `input`/`output` live on.
  int device = kCpuDevice;
  // GPU only: a cudaEvent_t the producer recorded after writing `input`
  // (the engine waits on it before reading); its deleter destroys it. Null
  // when the input is already complete. Opaque here so the engine's
  // framework-free core needs no CUDA headers.
  std::shared_ptr<void> ready_event;

  int64_t NumElements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  int64_t NumBytes() const { return NumElements() * static_cast<int64_t>(DataTypeSize(dtype)); }
};

}  // namespace tf_ring

#endif  // TF_RING_COMMON_TENSOR_ENTRY_H_
