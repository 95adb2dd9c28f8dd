// Ops that ask the engine rather than move tensors: the topology read at run
// time (rank_op and friends, so a graph built before init() still gives the
// right values) and the barrier.
#include <algorithm>
#include <vector>

#include "tensorflow/collective_kernel.h"

namespace tf_ring {

namespace tf = ::tensorflow;

namespace {

class TopologyKernel : public tf::OpKernel {
 public:
  explicit TopologyKernel(tf::OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("which", &which_));
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_id_));
  }

  void Compute(tf::OpKernelContext* ctx) override {
    OP_REQUIRES(ctx, Engine::Get().started(),
                absl::FailedPreconditionError("tf_ring is not initialized: call tf_ring.init() "
                                              "before running tf_ring." + which_ + "_op()."));
    const Topology t = Engine::Get().topology();
    std::vector<int> set_ranks;
    OP_REQUIRES(ctx, Engine::Get().ProcessSetRanks(process_set_id_, &set_ranks),
                absl::InvalidArgumentError("tf_ring." + which_ + "_op: process set " +
                                           std::to_string(process_set_id_) +
                                           " is not registered (never added, or removed)."));
    const bool included =
        std::find(set_ranks.begin(), set_ranks.end(), t.rank) != set_ranks.end();
    const int value = which_ == "rank"         ? t.rank
                      : which_ == "size"       ? static_cast<int>(set_ranks.size())
                      : which_ == "local_rank" ? t.local_rank
                      : which_ == "local_size" ? t.local_size
                                               : (included ? 1 : 0);
    tf::Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tf::TensorShape({}), &out));
    out->scalar<int32_t>()() = value;
  }

 private:
  std::string which_;
  int process_set_id_ = 0;
};

class BarrierKernel : public tf::AsyncOpKernel {
 public:
  explicit BarrierKernel(tf::OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("tensor_name", &tensor_name_));
    if (tensor_name_.empty()) tensor_name_ = name();
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_id_));
  }

  void ComputeAsync(tf::OpKernelContext* ctx, DoneCallback done) override {
    // An empty tensor: the barrier negotiates like a collective but moves nothing.
    Request req;
    req.op = OpType::kBarrier;
    req.name = NameInLoop(tensor_name_, ctx);
    req.in_loop = InLoop(ctx);
    req.dtype = DataType::kUint8;
    req.shape = {0};
    TensorEntry entry;
    entry.name = req.name;
    entry.op = OpType::kBarrier;
    entry.dtype = DataType::kUint8;
    entry.shape = {0};
    entry.done = [ctx, done](const Status& s) {
      if (!s.ok()) ctx->SetStatus(ToTfStatus(s));
      done();
    };
    Status s = Engine::Get().Enqueue(std::move(entry), std::move(req), process_set_id_);
    if (!s.ok()) {
      ctx->SetStatus(ToTfStatus(s));
      done();
    }
  }

 private:
  std::string tensor_name_;
  int process_set_id_ = 0;
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("TfRingTopology").Device(tf::DEVICE_CPU), TopologyKernel);
REGISTER_KERNEL_BUILDER(Name("TfRingBarrier").Device(tf::DEVICE_CPU), BarrierKernel);

}  // namespace tf_ring
