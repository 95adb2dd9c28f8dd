// Where a collective kernel's output gets its memory, cheapest first:
//  1. the input's own buffer, when TensorFlow says nobody else holds it
//     (forward_input_or_allocate_output): a gradient nobody else reads is
//     reduced in place, as MPI_IN_PLACE would, and no second copy exists;
//  2. for a large host output, a block kept warm by tf_ring (WarmOutputs):
//     returned when TensorFlow frees the tensor and handed to the next
//     output of the same size, so a training step's outputs fault their
//     pages in once, not every step;
//  3. otherwise TensorFlow's allocator, as any op.
// Why 2 exists: TensorFlow's default CPU allocator is malloc, which serves
// a block over 32 MB as a fresh mmap every time: a 64 MB output faulted
// 16,384 pages per call, about as long as the reduction (docs/performance.md).
#ifndef TF_RING_TENSORFLOW_WARM_OUTPUTS_H_
#define TF_RING_TENSORFLOW_WARM_OUTPUTS_H_

#include <cstddef>

#include "tensorflow/core/framework/op_kernel.h"

namespace tf_ring {

enum class OutputMemory { kInput, kWarm, kFresh };

// Outputs at least this large come from warm blocks (smaller ones are kept
// warm by malloc's own heap).
constexpr size_t kMinWarmOutputBytes = size_t{256} << 10;
// The most memory kept in idle blocks; a block that would exceed it is
// given back to the system when freed, the least recently used first.
constexpr size_t kMaxIdleWarmBytes = size_t{128} << 20;

// Output `output_index`, shaped like input `input_index`, by the rules
// above. `on_host`: the kernel runs on the CPU device (a GPU kernel's
// output always comes from TensorFlow's device allocator).
absl::Status AllocateCollectiveOutput(::tensorflow::OpKernelContext* ctx, int input_index,
                                      int output_index, bool on_host, ::tensorflow::Tensor** output,
                                      OutputMemory* how);

// Bytes held now in idle warm blocks (for tests and the docs' figures).
size_t IdleWarmOutputBytes();

}  // namespace tf_ring

#endif  // TF_RING_TENSORFLOW_WARM_OUTPUTS_H_
