// Factories for the tf_ring kernels, so a second device can register the
// same kernel classes from its own file (gpu_kernels.cc in CUDA builds)
// while each class stays private to the file that defines it.
#ifndef TF_RING_TENSORFLOW_KERNEL_FACTORIES_H_
#define TF_RING_TENSORFLOW_KERNEL_FACTORIES_H_

#include "tensorflow/core/framework/op_kernel.h"

namespace tf_ring {

::tensorflow::OpKernel* NewAllreduceKernel(::tensorflow::OpKernelConstruction* c);
::tensorflow::OpKernel* NewAllgatherKernel(::tensorflow::OpKernelConstruction* c);
::tensorflow::OpKernel* NewBroadcastKernel(::tensorflow::OpKernelConstruction* c);
::tensorflow::OpKernel* NewAlltoallKernel(::tensorflow::OpKernelConstruction* c);
::tensorflow::OpKernel* NewReducescatterKernel(::tensorflow::OpKernelConstruction* c);
::tensorflow::OpKernel* NewGroupedAllreduceKernel(::tensorflow::OpKernelConstruction* c);
::tensorflow::OpKernel* NewJoinKernel(::tensorflow::OpKernelConstruction* c);

}  // namespace tf_ring

#endif  // TF_RING_TENSORFLOW_KERNEL_FACTORIES_H_
