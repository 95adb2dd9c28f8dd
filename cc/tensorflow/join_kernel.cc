// join(): this rank stops submitting collectives; the engine stands in for it
// (zeros to reductions, no rows to allgathers) until every rank has joined.
#include "tensorflow/collective_kernel.h"
#include "tensorflow/kernel_factories.h"

namespace tf_ring {

namespace tf = ::tensorflow;

namespace {

// One name for every rank's join, so the coordinator sees one request per rank.
constexpr char kJoinTensorName[] = "tf_ring.join";

class JoinKernel : public tf::AsyncOpKernel {
 public:
  explicit JoinKernel(tf::OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_id_));
  }

  void ComputeAsync(tf::OpKernelContext* ctx, DoneCallback done) override {
    tf::Tensor* output = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(0, tf::TensorShape({}), &output), done);
    TensorEntry entry;
    entry.name = kJoinTensorName;
    entry.op = OpType::kJoin;
    entry.dtype = DataType::kInt32;
    entry.output = const_cast<char*>(output->tensor_data().data());
    entry.done = [ctx, done](const Status& s) {
      if (!s.ok()) ctx->SetStatus(ToTfStatus(s));
      done();
    };
    Request request;
    request.op = OpType::kJoin;
    request.dtype = DataType::kInt32;
    request.name = kJoinTensorName;
    Status s = Engine::Get().Enqueue(std::move(entry), std::move(request), process_set_id_);
    if (!s.ok()) {
      ctx->SetStatus(ToTfStatus(s));
      done();
    }
  }

 private:
  int process_set_id_ = 0;  // 0: the global set; else join() of that set's members
};

}  // namespace

tf::OpKernel* NewJoinKernel(tf::OpKernelConstruction* c) { return new JoinKernel(c); }

REGISTER_KERNEL_BUILDER(Name("TfRingJoin").Device(tf::DEVICE_CPU), JoinKernel);

}  // namespace tf_ring
