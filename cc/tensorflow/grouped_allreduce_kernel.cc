// Grouped allreduce: N tensors enter the engine in one atomic step, so they
// are negotiated in the same cycle (and can be fused) even when called
// eagerly. The op finishes when the last of its N collectives does.
#include <atomic>
#include <memory>

#include "tensorflow/collective_kernel.h"
#include "tensorflow/kernel_factories.h"

namespace tf_ring {

namespace tf = ::tensorflow;

namespace {

class GroupedAllreduceKernel : public CollectiveKernel {
 public:
  explicit GroupedAllreduceKernel(tf::OpKernelConstruction* c) : CollectiveKernel(c) {
    ReadReduceAttrs(c, &reduce_op_, &prescale_, &postscale_);
  }

  void ComputeAsync(tf::OpKernelContext* ctx, DoneCallback done) override {
    const int n = ctx->num_inputs();
    auto remaining = std::make_shared<std::atomic<int>>(n);
    auto finish_one = [remaining, done]() {
      if (remaining->fetch_sub(1) == 1) done();
    };

    std::vector<TensorEntry> entries;
    std::vector<Request> requests;
    for (int i = 0; i < n; ++i) {
      tf::Tensor* output = nullptr;
      OP_REQUIRES_OK_ASYNC(
          ctx, ctx->forward_input_or_allocate_output({i}, i, ctx->input(i).shape(), &output), done);
      // Each member is its own tensor to the engine, named after the group.
      const std::string name = tensor_name_ + "." + std::to_string(i);
      const tf::Tensor& input = ctx->input(i);
      Request req;
      req.op = OpType::kAllreduce;
      req.name = name;
      req.reduce_op = reduce_op_;
      req.prescale = prescale_;
      req.postscale = postscale_;
      ToEngineDtype(input.dtype(), &req.dtype);
      for (int d = 0; d < input.dims(); ++d) req.shape.push_back(input.dim_size(d));
      entries.push_back(MakeEntryForInput(ctx, i, name, OpType::kAllreduce, output, finish_one));
      req.device = entries.back().device;
      requests.push_back(std::move(req));
    }
    if (n == 0) {
      done();
      return;
    }
    Status s = Engine::Get().EnqueueGroup(std::move(entries), std::move(requests));
    if (!s.ok()) {
      ctx->SetStatus(ToTfStatus(s));
      done();
    }
  }

 private:
  ReduceOp reduce_op_;
  float prescale_, postscale_;
};

}  // namespace

tf::OpKernel* NewGroupedAllreduceKernel(tf::OpKernelConstruction* c) { return new GroupedAllreduceKernel(c); }

REGISTER_KERNEL_BUILDER(Name("TfRingGroupedAllreduce").Device(tf::DEVICE_CPU),
                        GroupedAllreduceKernel);

}  // namespace tf_ring
