// The collective kernels: validate, allocate what is known, enqueue, return.
// The engine finishes each op through the entry's callback. Registered here
// for CPU; gpu_kernels.cc registers the same classes for GPU in CUDA builds.
#include "tensorflow/collective_kernel.h"
#include "tensorflow/kernel_factories.h"

namespace tf_ring {

namespace tf = ::tensorflow;

namespace {

class AllreduceKernel : public CollectiveKernel {
 public:
  explicit AllreduceKernel(tf::OpKernelConstruction* c) : CollectiveKernel(c) {
    ReadReduceAttrs(c, &reduce_op_, &prescale_, &postscale_);
  }

  void ComputeAsync(tf::OpKernelContext* ctx, DoneCallback done) override {
    tf::Tensor* output = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->forward_input_or_allocate_output({0}, 0, ctx->input(0).shape(), &output),
                         done);
    Request req;
    req.reduce_op = reduce_op_;
    req.prescale = prescale_;
    req.postscale = postscale_;
    Submit(ctx, done, OpType::kAllreduce, output, std::move(req));
  }

 private:
  ReduceOp reduce_op_;
  float prescale_, postscale_;
};

class AllgatherKernel : public CollectiveKernel {
 public:
  using CollectiveKernel::CollectiveKernel;

  void ComputeAsync(tf::OpKernelContext* ctx, DoneCallback done) override {
    OP_REQUIRES_ASYNC(ctx, ctx->input(0).dims() >= 1,
                      absl::InvalidArgumentError("allgather of tensor '" + tensor_name_ +
                                                 "' needs rank 1 or more; got a scalar. "
                                                 "Reshape it to [1] first."),
                      done);
    Submit(ctx, done, OpType::kAllgather, nullptr, Request());
  }
};

class BroadcastKernel : public CollectiveKernel {
 public:
  explicit BroadcastKernel(tf::OpKernelConstruction* c) : CollectiveKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("root_rank", &root_rank_));
  }

  void ComputeAsync(tf::OpKernelContext* ctx, DoneCallback done) override {
    tf::Tensor* output = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->forward_input_or_allocate_output({0}, 0, ctx->input(0).shape(), &output),
                         done);
    Request req;
    req.root_rank = root_rank_;
    Submit(ctx, done, OpType::kBroadcast, output, std::move(req));
  }

 private:
  int root_rank_;
};

}  // namespace

tf::OpKernel* NewAllreduceKernel(tf::OpKernelConstruction* c) { return new AllreduceKernel(c); }
tf::OpKernel* NewAllgatherKernel(tf::OpKernelConstruction* c) { return new AllgatherKernel(c); }
tf::OpKernel* NewBroadcastKernel(tf::OpKernelConstruction* c) { return new BroadcastKernel(c); }

REGISTER_KERNEL_BUILDER(Name("TfRingAllreduce").Device(tf::DEVICE_CPU), AllreduceKernel);
REGISTER_KERNEL_BUILDER(Name("TfRingAllgather").Device(tf::DEVICE_CPU), AllgatherKernel);
REGISTER_KERNEL_BUILDER(Name("TfRingBroadcast").Device(tf::DEVICE_CPU), BroadcastKernel);

}  // namespace tf_ring
