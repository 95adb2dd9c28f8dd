// CPU kernels: validate, allocate what is known, enqueue, return. The engine
// thread finishes each op through the entry's callback.
#include "common/engine.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/tensor_adapter.h"

namespace tf_ring {

namespace tf = ::tensorflow;

namespace {

class CollectiveKernel : public tf::AsyncOpKernel {
 public:
  explicit CollectiveKernel(tf::OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("tensor_name", &tensor_name_));
    // Without an explicit name, the graph node's name identifies the tensor:
    // identical graphs give identical names on every rank.
    if (tensor_name_.empty()) tensor_name_ = name();
  }

 protected:
  // Fills what every op shares and hands the pair to the engine.
  void Submit(tf::OpKernelContext* ctx, DoneCallback done, OpType op, tf::Tensor* output,
              Request request) {
    const tf::Tensor& input = ctx->input(0);
    request.op = op;
    request.name = tensor_name_;
    ToEngineDtype(input.dtype(), &request.dtype);
    for (int d = 0; d < input.dims(); ++d) request.shape.push_back(input.dim_size(d));
    TensorEntry entry = MakeEntry(ctx, tensor_name_, op, output, done);
    Status s = Engine::Get().Enqueue(std::move(entry), std::move(request));
    if (!s.ok()) {
      ctx->SetStatus(ToTfStatus(s));
      done();
    }
  }

  std::string tensor_name_;
};

class AllreduceKernel : public CollectiveKernel {
 public:
  explicit AllreduceKernel(tf::OpKernelConstruction* c) : CollectiveKernel(c) {
    int reduce_op;
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &reduce_op));
    OP_REQUIRES(c, reduce_op >= 0 && reduce_op <= static_cast<int>(ReduceOp::kProduct),
                absl::InvalidArgumentError("reduce_op out of range: " + std::to_string(reduce_op)));
    reduce_op_ = static_cast<ReduceOp>(reduce_op);
    OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale_));
    OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale_));
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

REGISTER_KERNEL_BUILDER(Name("TfRingAllreduce").Device(tf::DEVICE_CPU), AllreduceKernel);
REGISTER_KERNEL_BUILDER(Name("TfRingAllgather").Device(tf::DEVICE_CPU), AllgatherKernel);
REGISTER_KERNEL_BUILDER(Name("TfRingBroadcast").Device(tf::DEVICE_CPU), BroadcastKernel);

}  // namespace tf_ring
