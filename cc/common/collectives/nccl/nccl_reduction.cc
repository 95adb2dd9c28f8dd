// Maps a response's reduce op and scale factors onto one NCCL reduction.
// Sum and Average are linear, so prescale * postscale (/ divisor) becomes
// one pre-multiplication; Min, Max and Product are not, and refuse scaling.
#include <string>

#include "common/collectives/nccl/nccl_collectives.h"
#include "common/transport/gpu/cuda_check.h"
#include "common/base/half.h"

namespace tf_ring {

namespace {
std::string TensorOf(const Response& resp) {
  return std::string(OpTypeName(resp.op)) + " of tensor '" + resp.names[0] + "'";
}
}  // namespace

Status NcclReduction::Create(const NcclContext& ctx, const Response& resp) {
  Release();
  // Ranks that joined add nothing and do not count for Average.
  const int divisor = resp.has_joined_ranks() ? resp.contributors : ctx.size;
  const double factor = resp.prescale * resp.postscale;
  const bool average = resp.reduce_op == ReduceOp::kAverage;
  switch (resp.reduce_op) {
    case ReduceOp::kMin:
    case ReduceOp::kMax:
    case ReduceOp::kProduct:
      if (factor != 1.0) {
        return Status::InvalidArgument(
            TensorOf(resp) + ": prescale/postscale factors with " + ReduceOpName(resp.reduce_op) +
            " are not supported for GPU tensors; scale the tensor before or after the collective.");
      }
      op_ = resp.reduce_op == ReduceOp::kMin ? ncclMin
            : resp.reduce_op == ReduceOp::kMax ? ncclMax : ncclProd;
      return Status::OK();
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      break;
  }
  if (factor == 1.0 && (!average || divisor == ctx.size)) {
    op_ = average ? ncclAvg : ncclSum;  // ncclAvg: NCCL >= 2.10; integers divide and truncate
    return Status::OK();
  }
  if (!IsFloatingPoint(resp.dtype)) {
    return Status::InvalidArgument(
        TensorOf(resp) + ": " + (average ? "Average while some ranks have joined" : "scale factors") +
        " on integer GPU tensors (" + DataTypeName(resp.dtype) +
        ") are not supported; use a floating-point tensor or scale it yourself.");
  }
  const double scalar = average ? factor / divisor : factor;
  // The scalar has the tensor's own type, read from host memory at enqueue.
  union {
    double f64;
    float f32;
    uint16_t f16;
  } value;
  switch (resp.dtype) {
    case DataType::kFloat64: value.f64 = scalar; break;
    case DataType::kFloat32: value.f32 = static_cast<float>(scalar); break;
    case DataType::kFloat16: value.f16 = FloatToHalf(static_cast<float>(scalar)); break;
    case DataType::kBFloat16: value.f16 = FloatToBFloat16(static_cast<float>(scalar)); break;
    default: return Status::InvalidArgument(TensorOf(resp) + ": cannot scale this dtype");
  }
  Status s = NcclStatus(ncclRedOpCreatePreMulSum(&op_, &value, NcclType(resp.dtype),
                                                 ncclScalarHostImmediate, ctx.comm),
                        "ncclRedOpCreatePreMulSum", resp.names[0]);
  if (s.ok()) created_on_ = ctx.comm;
  return s;
}

void NcclReduction::Release() {
  if (created_on_) ncclRedOpDestroy(op_, created_on_);
  created_on_ = nullptr;
}

}  // namespace tf_ring
