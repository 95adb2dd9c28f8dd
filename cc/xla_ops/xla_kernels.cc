// XLA kernels for tf_ring's TensorFlow ops: inside jit_compile=True each op
// becomes one typed-FFI custom call ("tf_ring_collective", handled in
// ffi_handlers.cc) whose backend_config names the tensor and carries the
// op's attributes. Grouped ops stay one call so their members fuse.
// Allgather, reducescatter and alltoall get static output shapes
// (static_shapes.h); the handler checks the engine's agreed shape against them.
//
// Every call also takes the previous tf_ring call's chain scalar and returns
// its own: each call blocks until every rank submitted it, so the calls must
// run in the same order everywhere. Without the chain, XLA's scheduler may
// order independent calls differently on ranks whose HLO differs (a
// reducescatter's rank-dependent output shape), which deadlocks. The chain
// follows the order tf2xla compiles the graph's nodes in (a name-stable
// topological order), the same on every rank that builds the same graph.
#include <string>
#include <vector>

#include "common/base/message.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/tensor_adapter.h"
#include "xla/hlo/builder/xla_builder.h"
#include "xla/shape_util.h"
#include "xla_ops/backend_config.h"
#include "xla_ops/static_shapes.h"

namespace tf_ring {
namespace xla_ops {
namespace {

namespace tf = ::tensorflow;

// Per compilation (it lives in the compile's step container): the chain
// scalar of the last tf_ring call emitted into this computation.
class Chain : public tf::ResourceBase {
 public:
  std::string DebugString() const override { return "tf_ring XLA call chain"; }
  xla::XlaOp last;
};

// The chain operand for the next call, and where to record its chain output.
absl::Status ChainFor(tf::XlaOpKernelContext* ctx, Chain** chain, xla::XlaOp* in) {
  tf::OpKernelContext* k = ctx->op_kernel_context();
  if (k->step_container() == nullptr)
    return absl::InternalError("tf_ring: no step container while compiling for XLA");
  TF_RETURN_IF_ERROR(k->step_container()->LookupOrCreate<Chain>(
      k->resource_manager(), "tf_ring_xla_chain", chain, [](Chain** c) {
        *c = new Chain;
        return absl::OkStatus();
      }));
  // A nested computation (a loop body) has its own builder: start afresh.
  if ((*chain)->last.valid() && (*chain)->last.builder() == ctx->builder()) {
    *in = (*chain)->last;
  } else {
    *in = xla::ConstantR0<int32_t>(ctx->builder(), 0);
  }
  return absl::OkStatus();
}

class CollectiveXlaKernel : public tf::XlaOpKernel {
 public:
  CollectiveXlaKernel(tf::OpKernelConstruction* c, OpType op, bool grouped)
      : XlaOpKernel(c), op_(op), grouped_(grouped) {
    OP_REQUIRES_OK(c, c->GetAttr("tensor_name", &name_));
    if (name_.empty()) name_ = name();  // as the TF kernel does
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_));
    config_["process_set"] = std::to_string(process_set_);
    config_["op"] = std::to_string(static_cast<int>(op));
    config_["name"] = name_;
    config_["grouped"] = grouped ? "1" : "0";
    // Outputs sized here, at compile time: the engine must confirm them.
    config_["static"] =
        op == OpType::kAllgather || op == OpType::kAlltoall || op == OpType::kReducescatter ? "1"
                                                                                             : "0";
    if (op == OpType::kAllreduce || op == OpType::kReducescatter) {
      int reduce_op = 0;
      float prescale = 1.0f, postscale = 1.0f;
      OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &reduce_op));
      OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale));
      OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale));
      config_["reduce_op"] = std::to_string(reduce_op);
      // %.9g keeps every float32 bit through the text round trip.
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.9g", prescale);
      config_["prescale"] = buf;
      std::snprintf(buf, sizeof(buf), "%.9g", postscale);
      config_["postscale"] = buf;
    } else {
      config_["reduce_op"] = "0";
      config_["prescale"] = "1";
      config_["postscale"] = "1";
    }
    if (op == OpType::kBroadcast) {
      int root = 0;
      OP_REQUIRES_OK(c, c->GetAttr("root_rank", &root));
      config_["root"] = std::to_string(root);
    }
  }

  void Compile(tf::XlaOpKernelContext* ctx) override {
    // Alltoall's second input is its splits, not a tensor to move.
    const int n = op_ == OpType::kAlltoall ? 1 : ctx->num_inputs();
    if (n == 0) return;
    SetPosition pos;
    std::vector<int64_t> splits;
    if (config_["static"] == "1") {
      std::string err = LookUpSetPosition(process_set_, name_, &pos);
      OP_REQUIRES(ctx, err.empty(), absl::FailedPreconditionError(err));
      if (op_ == OpType::kAlltoall) {
        OP_REQUIRES(ctx, ctx->ConstantInputAsIntVector(1, &splits).ok(),
                    absl::InvalidArgumentError(
                        "tf_ring: alltoall of tensor '" + name_ +
                        "' cannot compile inside jit_compile (XLA): its splits are computed at run "
                        "time, and XLA needs the received shape at compile time. Omit splits= "
                        "(equal split), or call alltoall outside jit_compile."));
      }
    }
    std::vector<xla::XlaOp> operands;
    std::vector<xla::Shape> shapes;
    std::string dtypes;
    for (int i = 0; i < n; ++i) {
      const std::string member = grouped_ ? name_ + "." + std::to_string(i) : name_;
      DataType dtype;
      OP_REQUIRES(ctx, ToEngineDtype(ctx->input_type(i), &dtype),
                  absl::InvalidArgumentError("tf_ring: tensor '" + member +
                                             "' has a dtype tf_ring's engine does not support"));
      if (!dtypes.empty()) dtypes += ",";
      dtypes += std::to_string(static_cast<int>(dtype));
      operands.push_back(ctx->Input(i));
      auto shape = ctx->InputXlaShape(i);
      OP_REQUIRES_OK(ctx, shape.status());
      std::vector<int64_t> in_dims(shape->dimensions().begin(), shape->dimensions().end());
      std::vector<int64_t> out_dims;
      std::string err = StaticOutputDims(op_, member, in_dims, splits, pos, &out_dims);
      OP_REQUIRES(ctx, err.empty(), absl::InvalidArgumentError(err));
      shapes.push_back(xla::ShapeUtil::MakeShape(shape->element_type(), out_dims));
    }
    Chain* chain = nullptr;
    xla::XlaOp chain_in;
    OP_REQUIRES_OK(ctx, ChainFor(ctx, &chain, &chain_in));
    tf::core::ScopedUnref unref_chain(chain);
    operands.push_back(chain_in);
    shapes.push_back(xla::ShapeUtil::MakeShape(xla::S32, {}));
    BackendConfig config = config_;
    config["dtypes"] = dtypes;
    if (config_["static"] == "1") config["set_size"] = std::to_string(pos.size);
    // The typed FFI reads backend_config as an MLIR dictionary; our whole
    // config is one string attribute in it.
    const std::string opaque = "{config = \"" + EncodeBackendConfig(config) + "\"}";
    xla::XlaOp call = xla::CustomCall(
        ctx->builder(), "tf_ring_collective", operands, xla::ShapeUtil::MakeTupleShape(shapes),
        opaque, /*has_side_effect=*/true, /*output_operand_aliasing=*/{}, /*literal=*/nullptr,
        xla::CustomCallSchedule::SCHEDULE_NONE, xla::CustomCallApiVersion::API_VERSION_TYPED_FFI);
    for (int i = 0; i < n; ++i) ctx->SetOutput(i, xla::GetTupleElement(call, i));
    chain->last = xla::GetTupleElement(call, n);
    if (op_ == OpType::kAlltoall) {
      // received_splits: an equal split receives rows / size from each rank.
      const int64_t each = shapes[0].dimensions(0) / pos.size;
      ctx->SetOutput(1, xla::ConstantR1<int32_t>(
                            ctx->builder(), std::vector<int32_t>(pos.size, static_cast<int32_t>(each))));
    }
  }

 private:
  OpType op_;
  bool grouped_;
  int process_set_ = 0;
  std::string name_;
  BackendConfig config_;
};

template <OpType kOp, bool kGrouped>
class Kernel : public CollectiveXlaKernel {
 public:
  explicit Kernel(tf::OpKernelConstruction* c) : CollectiveXlaKernel(c, kOp, kGrouped) {}
};

REGISTER_XLA_OP(Name("TfRingAllreduce"), (Kernel<OpType::kAllreduce, false>));
REGISTER_XLA_OP(Name("TfRingGroupedAllreduce"), (Kernel<OpType::kAllreduce, true>));
REGISTER_XLA_OP(Name("TfRingBroadcast"), (Kernel<OpType::kBroadcast, false>));
REGISTER_XLA_OP(Name("TfRingAllgather"), (Kernel<OpType::kAllgather, false>));
REGISTER_XLA_OP(Name("TfRingGroupedAllgather"), (Kernel<OpType::kAllgather, true>));
REGISTER_XLA_OP(Name("TfRingReducescatter"), (Kernel<OpType::kReducescatter, false>));
REGISTER_XLA_OP(Name("TfRingGroupedReducescatter"), (Kernel<OpType::kReducescatter, true>));
REGISTER_XLA_OP(Name("TfRingAlltoall"), (Kernel<OpType::kAlltoall, false>));

}  // namespace
}  // namespace xla_ops
}  // namespace tf_ring
