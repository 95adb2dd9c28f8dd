// CUDA builds only: the DEVICE_GPU kernels of every tf_ring op. They are the
// CPU kernel classes (kernel_factories.h); what differs is the entry, which
// this file's hook marks with the op's GPU and the event that tells the
// engine when TensorFlow's stream has produced the input. Shapes and splits
// the host must read stay in host memory.
#include <cuda_runtime_api.h>

#include "common/transport/device_transport.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/kernel_factories.h"
#include "tensorflow/tensor_adapter.h"
#include "xla/stream_executor/stream.h"
#include "xla/stream_executor/stream_executor.h"

namespace tf_ring {

namespace tf = ::tensorflow;

namespace {

void AttachGpu(tf::OpKernelContext* ctx, TensorEntry* entry) {
  tf::DeviceContext* device_context = ctx->op_device_context();
  if (device_context == nullptr || device_context->stream() == nullptr) return;  // a CPU kernel
  auto* stream = device_context->stream();
  // TF 2.21: the CUDA stream behind TensorFlow's StreamExecutor stream.
  auto cuda_stream = reinterpret_cast<cudaStream_t>(stream->platform_specific_handle().stream);
  entry->device = stream->parent()->device_ordinal();
  Status s = RecordReadyEvent(entry->device, cuda_stream, &entry->ready_event);
  if (!s.ok()) {
    // No event: make the input complete the slow way rather than race it.
    entry->ready_event.reset();
    cudaStreamSynchronize(cuda_stream);
  }
}

// Installs the hook when the library loads, before any kernel runs.
const bool kHookInstalled = (SetDeviceEntryHook(&AttachGpu), true);

using Factory = tf::OpKernel* (*)(tf::OpKernelConstruction*);

void Register(const tf::KernelDef* def, const char* class_name, Factory factory) {
  // Registrars live for the process, like REGISTER_KERNEL_BUILDER's.
  new tf::kernel_factory::OpKernelRegistrar(def, class_name, factory);
}

const bool kRegistered = [] {
  Register(tf::KernelDefBuilder("TfRingAllreduce").Device(tf::DEVICE_GPU).Build(), "AllreduceKernel",
           &NewAllreduceKernel);
  Register(tf::KernelDefBuilder("TfRingAllgather").Device(tf::DEVICE_GPU).Build(), "AllgatherKernel",
           &NewAllgatherKernel);
  Register(tf::KernelDefBuilder("TfRingBroadcast").Device(tf::DEVICE_GPU).Build(), "BroadcastKernel",
           &NewBroadcastKernel);
  Register(tf::KernelDefBuilder("TfRingAlltoall").Device(tf::DEVICE_GPU).HostMemory("splits")
               .HostMemory("received_splits").Build(),
           "AlltoallKernel", &NewAlltoallKernel);
  Register(tf::KernelDefBuilder("TfRingReducescatter").Device(tf::DEVICE_GPU).Build(), "ReducescatterKernel",
           &NewReducescatterKernel);
  Register(tf::KernelDefBuilder("TfRingGroupedAllreduce").Device(tf::DEVICE_GPU).Build(),
           "GroupedAllreduceKernel", &NewGroupedAllreduceKernel);
  // join() has no tensor input; its int32 result lives on the host.
  Register(tf::KernelDefBuilder("TfRingJoin").Device(tf::DEVICE_GPU).HostMemory("last_joined_rank").Build(),
           "JoinKernel", &NewJoinKernel);
  return true;
}();

}  // namespace

}  // namespace tf_ring
