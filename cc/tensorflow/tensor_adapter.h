// Translation between TensorFlow kernels and the engine's TensorEntry.
#ifndef TF_RING_TENSORFLOW_TENSOR_ADAPTER_H_
#define TF_RING_TENSORFLOW_TENSOR_ADAPTER_H_

#include <string>

#include "common/base/status.h"
#include "common/base/tensor_entry.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace tf_ring {

absl::Status ToTfStatus(const Status& s);
// False when TensorFlow's dtype has no engine equivalent.
bool ToEngineDtype(::tensorflow::DataType tf_dtype, DataType* out);

// In a CUDA build, gpu_kernels.cc installs this: for a kernel running on a
// GPU it sets the entry's device and records the input's ready event on
// TensorFlow's stream. Null (CPU build): entries stay on the host.
using DeviceEntryHook = void (*)(::tensorflow::OpKernelContext* ctx, TensorEntry* entry);
void SetDeviceEntryHook(DeviceEntryHook hook);

// Builds the entry for input 0 of `ctx`: buffers, shape, output allocation
// through the kernel context, and a callback that sets the status and
// calls `done`. `output` may be null (allocated later by the engine).
TensorEntry MakeEntry(::tensorflow::OpKernelContext* ctx, const std::string& name, OpType op,
                      ::tensorflow::Tensor* output, ::tensorflow::AsyncOpKernel::DoneCallback done);
// The same for input `index` (ops with several inputs, e.g. grouped allreduce);
// the entry's output k is the op's output index + k.
TensorEntry MakeEntryForInput(::tensorflow::OpKernelContext* ctx, int index, const std::string& name,
                              OpType op, ::tensorflow::Tensor* output,
                              ::tensorflow::AsyncOpKernel::DoneCallback done);

}  // namespace tf_ring

#endif  // TF_RING_TENSORFLOW_TENSOR_ADAPTER_H_
