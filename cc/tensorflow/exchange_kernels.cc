// Kernels whose output shape only the negotiation knows: alltoall and
// reducescatter. Argument checks that involve other ranks (splits against
// the size, root ranks) happen in the coordinator so every rank fails alike.
#include "tensorflow/collective_kernel.h"
#include "tensorflow/kernel_factories.h"

namespace tf_ring {

namespace tf = ::tensorflow;

namespace {

class AlltoallKernel : public CollectiveKernel {
 public:
  using CollectiveKernel::CollectiveKernel;

  void ComputeAsync(tf::OpKernelContext* ctx, DoneCallback done) override {
    const tf::Tensor& splits = ctx->input(1);
    OP_REQUIRES_ASYNC(ctx, splits.dims() == 1,
                      absl::InvalidArgumentError("alltoall of tensor '" + tensor_name_ +
                                                 "': splits must be a vector with one entry per rank"),
                      done);
    Request req;
    if (splits.NumElements() > 0) {
      auto values = splits.vec<int32_t>();
      for (int64_t i = 0; i < splits.NumElements(); ++i) req.splits.push_back(values(i));
    } else if (ctx->input(0).dims() > 0 && Engine::Get().running()) {
      // Rows that do not divide evenly leave the splits empty: the coordinator
      // then fails the tensor on every rank (InvalidArgument, as in Horovod).
      std::vector<int> ranks;
      const int size = Engine::Get().ProcessSetRanks(process_set_id_, &ranks)
                           ? static_cast<int>(ranks.size()) : Engine::Get().topology().size;
      if (ctx->input(0).dim_size(0) % size == 0)
        req.splits.assign(size, ctx->input(0).dim_size(0) / size);
    }
    Submit(ctx, done, OpType::kAlltoall, nullptr, std::move(req));
  }
};

class ReducescatterKernel : public CollectiveKernel {
 public:
  explicit ReducescatterKernel(tf::OpKernelConstruction* c) : CollectiveKernel(c) {
    ReadReduceAttrs(c, &reduce_op_, &prescale_, &postscale_);
  }

  void ComputeAsync(tf::OpKernelContext* ctx, DoneCallback done) override {
    Request req;
    req.reduce_op = reduce_op_;
    req.prescale = prescale_;
    req.postscale = postscale_;
    Submit(ctx, done, OpType::kReducescatter, nullptr, std::move(req));
  }

 private:
  ReduceOp reduce_op_;
  float prescale_, postscale_;
};

}  // namespace

tf::OpKernel* NewAlltoallKernel(tf::OpKernelConstruction* c) { return new AlltoallKernel(c); }
tf::OpKernel* NewReducescatterKernel(tf::OpKernelConstruction* c) { return new ReducescatterKernel(c); }

REGISTER_KERNEL_BUILDER(Name("TfRingAlltoall").Device(tf::DEVICE_CPU).HostMemory("splits")
                            .HostMemory("received_splits"),
                        AlltoallKernel);
REGISTER_KERNEL_BUILDER(Name("TfRingReducescatter").Device(tf::DEVICE_CPU), ReducescatterKernel);

}  // namespace tf_ring
