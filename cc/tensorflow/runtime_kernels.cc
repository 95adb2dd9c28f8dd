// Ops that ask the engine rather than move tensors: the topology read at run
// time (rank_op and friends, so a graph built before init() still gives the
// right values) and the barrier.
#include "tensorflow/collective_kernel.h"

namespace tf_ring {

namespace tf = ::tensorflow;

namespace {

class TopologyKernel : public tf::OpKernel {
 public:
  explicit TopologyKernel(tf::OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("which", &which_));
  }

  void Compute(tf::OpKernelContext* ctx) override {
    OP_REQUIRES(ctx, Engine::Get().started(),
                absl::FailedPreconditionError("tf_ring is not initialized: call tf_ring.init() "
                                              "before running tf_ring." + which_ + "_op()."));
    const Topology t = Engine::Get().topology();
    const int value = which_ == "rank"         ? t.rank
                      : which_ == "size"       ? t.size
                      : which_ == "local_rank" ? t.local_rank
                                               : t.local_size;
    tf::Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tf::TensorShape({}), &out));
    out->scalar<int32_t>()() = value;
  }

 private:
  std::string which_;
};

class BarrierKernel : public tf::AsyncOpKernel {
 public:
  explicit BarrierKernel(tf::OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("tensor_name", &tensor_name_));
    if (tensor_name_.empty()) tensor_name_ = name();
  }

  void ComputeAsync(tf::OpKernelContext* ctx, DoneCallback done) override {
    // An empty tensor: the barrier negotiates like a collective but moves nothing.
    Request req;
    req.op = OpType::kBarrier;
    req.name = tensor_name_;
    req.dtype = DataType::kUint8;
    req.shape = {0};
    TensorEntry entry;
    entry.name = tensor_name_;
    entry.op = OpType::kBarrier;
    entry.dtype = DataType::kUint8;
    entry.shape = {0};
    entry.done = [ctx, done](const Status& s) {
      if (!s.ok()) ctx->SetStatus(ToTfStatus(s));
      done();
    };
    Status s = Engine::Get().Enqueue(std::move(entry), std::move(req));
    if (!s.ok()) {
      ctx->SetStatus(ToTfStatus(s));
      done();
    }
  }

 private:
  std::string tensor_name_;
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("TfRingTopology").Device(tf::DEVICE_CPU), TopologyKernel);
REGISTER_KERNEL_BUILDER(Name("TfRingBarrier").Device(tf::DEVICE_CPU), BarrierKernel);

}  // namespace tf_ring
