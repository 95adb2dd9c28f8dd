// Base class of the tf_ring async kernels: resolves the tensor name and hands
// an entry plus its request to the engine.
#ifndef TF_RING_TENSORFLOW_COLLECTIVE_KERNEL_H_
#define TF_RING_TENSORFLOW_COLLECTIVE_KERNEL_H_

#include <optional>
#include <string>

#include "common/engine.h"
#include "common/observability/stage_probe.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/eager_completion.h"
#include "tensorflow/loop_name.h"
#include "tensorflow/tensor_adapter.h"

namespace tf_ring {

class CollectiveKernel : public ::tensorflow::AsyncOpKernel {
 public:
  explicit CollectiveKernel(::tensorflow::OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("tensor_name", &tensor_name_));
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_id_));
    // Set by the Python wrappers when run eagerly.
    OP_REQUIRES_OK(c, c->GetAttr("eager", &eager_));
    // Without an explicit name, the graph node's name identifies the tensor:
    // identical graphs give identical names on every rank.
    if (tensor_name_.empty()) tensor_name_ = name();
  }

 protected:
  // Fills what every op shares (input 0) and hands the pair to the engine.
  void Submit(::tensorflow::OpKernelContext* ctx, DoneCallback done, OpType op,
              ::tensorflow::Tensor* output, Request request) {
    StageProbe::Stamp(kProbeSubmit);
    const ::tensorflow::Tensor& input = ctx->input(0);
    request.op = op;
    request.name = NameInLoop(tensor_name_, ctx);
    request.in_loop = InLoop(ctx);
    ToEngineDtype(input.dtype(), &request.dtype);
    for (int d = 0; d < input.dims(); ++d) request.shape.push_back(input.dim_size(d));
    std::optional<EagerCompletion> inline_wait;
    DoneCallback engine_done = eager_ ? WaitInlineIfSmall(ctx, input.TotalBytes(), done, &inline_wait) : done;
    TensorEntry entry = MakeEntry(ctx, request.name, op, output, std::move(engine_done));
    entry.finish_on = FinishOn(ctx);
    request.device = entry.device;
    Status s = Engine::Get().Enqueue(std::move(entry), std::move(request), process_set_id_);
    if (!s.ok()) {  // nothing was queued: the engine will not call back
      ctx->SetStatus(ToTfStatus(s));
      done();
      return;
    }
    if (inline_wait) inline_wait->WaitAndFinish();
  }

  // How a finished op reaches TensorFlow. Eagerly, a small op waits for its
  // result on the caller's thread (eager_completion.h): `inline_wait` is set
  // and the engine gets its marking callback in place of `done`.
  DoneCallback WaitInlineIfSmall(::tensorflow::OpKernelContext* ctx, int64_t bytes, DoneCallback done,
                                 std::optional<EagerCompletion>* inline_wait) const {
    if (!EagerCompletion::Applies(ctx, bytes)) return done;
    inline_wait->emplace(std::move(done), process_set_id_);
    return (*inline_wait)->ForEngine();
  }
  // In a graph, TensorFlow's executor goes on from `done` faster on its own
  // threads: the engine hands each batch's completions to them at once.
  const FrameworkScheduler* FinishOn(::tensorflow::OpKernelContext* ctx) const {
    return eager_ ? nullptr : ctx->runner();
  }

  std::string tensor_name_;
  int process_set_id_ = 0;  // 0: the global set
  bool eager_ = false;
};

// Reads the reduce_op / prescale_factor / postscale_factor attributes.
inline void ReadReduceAttrs(::tensorflow::OpKernelConstruction* c, ReduceOp* op, float* prescale,
                            float* postscale) {
  int reduce_op;
  OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &reduce_op));
  OP_REQUIRES(c, reduce_op >= 0 && reduce_op <= static_cast<int>(ReduceOp::kAdasum),
              absl::InvalidArgumentError("reduce_op out of range: " + std::to_string(reduce_op)));
  *op = static_cast<ReduceOp>(reduce_op);
  OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", prescale));
  OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", postscale));
}

}  // namespace tf_ring

#endif  // TF_RING_TENSORFLOW_COLLECTIVE_KERNEL_H_
