// Grouped collectives: N tensors enter the engine in one atomic step, so they
// are negotiated in the same cycle (and can be fused) even when called
// eagerly. The op finishes when the last of its N collectives does.
//
// How it finishes. In a graph, TensorFlow's executor continues on whatever
// thread calls done: from the engine thread, returning a tf.function's 160
// results took 1.0-1.2 ms, and 0.4-0.6 ms when the engine instead hands the
// completions to the executor's own thread pool (TensorEntry::finish_on;
// benchmarks/README.md). Eagerly a hop costs a pool thread's wake-up (25 us
// measured), so there a small group is finished by its waiting caller
// instead, as a single op is (eager_completion.h).
#include <atomic>
#include <memory>
#include <optional>

#include "tensorflow/collective_kernel.h"
#include "tensorflow/kernel_factories.h"

namespace tf_ring {

namespace tf = ::tensorflow;

namespace {

// kOp is the collective every member runs. Allreduce members write into
// outputs allocated here; allgather and reducescatter members allocate
// theirs once the negotiation knows the shape.
template <OpType kOp>
class GroupedKernel : public CollectiveKernel {
 public:
  explicit GroupedKernel(tf::OpKernelConstruction* c) : CollectiveKernel(c) {
    if (kOp != OpType::kAllgather) ReadReduceAttrs(c, &reduce_op_, &prescale_, &postscale_);
  }

  void ComputeAsync(tf::OpKernelContext* ctx, DoneCallback done) override {
    const int n = ctx->num_inputs();
    StageProbe::Stamp(kProbeSubmit);  // benchmarks/gradient_step.py's stage breakdown
    if (n == 0) {
      done();
      return;
    }
    for (int i = 0; i < n; ++i) {
      OP_REQUIRES_ASYNC(ctx, kOp == OpType::kAllreduce || ctx->input(i).dims() >= 1,
                        absl::InvalidArgumentError(
                            std::string(OpTypeName(kOp)) + " of tensor '" + tensor_name_ + "." +
                            std::to_string(i) + "' needs rank 1 or more; got a scalar. "
                            "Reshape it to [1] first."),
                        done);
    }
    std::optional<EagerCompletion> inline_wait;
    DoneCallback finish = eager_ ? WaitInlineIfSmall(ctx, TotalInputBytes(ctx), done, &inline_wait) : done;
    const FrameworkScheduler* finish_on = FinishOn(ctx);
    auto remaining = std::make_shared<std::atomic<int>>(n);
    auto finish_one = [remaining, finish]() {
      if (remaining->fetch_sub(1) == 1) finish();
    };

    std::vector<TensorEntry> entries;
    std::vector<Request> requests;
    const std::string group_name = NameInLoop(tensor_name_, ctx);
    for (int i = 0; i < n; ++i) {
      tf::Tensor* output = nullptr;
      if (kOp == OpType::kAllreduce) {
        OP_REQUIRES_OK_ASYNC(
            ctx, ctx->forward_input_or_allocate_output({i}, i, ctx->input(i).shape(), &output),
            done);
      }
      // Each member is its own tensor to the engine, named after the group.
      const std::string name = group_name + "." + std::to_string(i);
      const tf::Tensor& input = ctx->input(i);
      Request req;
      req.op = kOp;
      req.name = name;
      req.in_loop = InLoop(ctx);
      req.reduce_op = reduce_op_;
      req.prescale = prescale_;
      req.postscale = postscale_;
      ToEngineDtype(input.dtype(), &req.dtype);
      for (int d = 0; d < input.dims(); ++d) req.shape.push_back(input.dim_size(d));
      entries.push_back(MakeEntryForInput(ctx, i, name, kOp, output, finish_one));
      entries.back().finish_on = finish_on;
      req.device = entries.back().device;
      requests.push_back(std::move(req));
    }
    Status s = Engine::Get().EnqueueGroup(std::move(entries), std::move(requests), process_set_id_);
    if (!s.ok()) {  // nothing was queued: the engine will not call back
      ctx->SetStatus(ToTfStatus(s));
      done();
      return;
    }
    if (inline_wait) inline_wait->WaitAndFinish();
  }

 private:
  static int64_t TotalInputBytes(tf::OpKernelContext* ctx) {
    int64_t bytes = 0;
    for (int i = 0; i < ctx->num_inputs(); ++i) bytes += ctx->input(i).TotalBytes();
    return bytes;
  }

  ReduceOp reduce_op_ = ReduceOp::kSum;
  float prescale_ = 1.0f, postscale_ = 1.0f;
};

}  // namespace

tf::OpKernel* NewGroupedAllreduceKernel(tf::OpKernelConstruction* c) {
  return new GroupedKernel<OpType::kAllreduce>(c);
}

REGISTER_KERNEL_BUILDER(Name("TfRingGroupedAllreduce").Device(tf::DEVICE_CPU),
                        GroupedKernel<OpType::kAllreduce>);
REGISTER_KERNEL_BUILDER(Name("TfRingGroupedAllgather").Device(tf::DEVICE_CPU),
                        GroupedKernel<OpType::kAllgather>);
REGISTER_KERNEL_BUILDER(Name("TfRingGroupedReducescatter").Device(tf::DEVICE_CPU),
                        GroupedKernel<OpType::kReducescatter>);

}  // namespace tf_ring
