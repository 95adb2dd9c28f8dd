#include "common/mpi_types.h"

#include <algorithm>
#include <cstdint>

#include "common/half.h"

namespace tf_ring {

namespace {

enum Kind { kSumK = 0, kMinK, kMaxK, kProdK, kNumKinds };

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float), int K>
void Reduce16(void* in, void* inout, int* len, MPI_Datatype*) {
  const uint16_t* a = static_cast<const uint16_t*>(in);
  uint16_t* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    float x = ToFloat(a[i]), y = ToFloat(b[i]);
    float r = K == kSumK ? x + y : K == kMinK ? std::min(x, y) : K == kMaxK ? std::max(x, y) : x * y;
    b[i] = FromFloat(r);
  }
}

MPI_Op g_half_ops[kNumKinds] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
MPI_Op g_bf16_ops[kNumKinds] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};

Kind KindOf(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMin: return kMinK;
    case ReduceOp::kMax: return kMaxK;
    case ReduceOp::kProduct: return kProdK;
    default: return kSumK;
  }
}

}  // namespace

void CreateCustomMpiOps() {
  MPI_Op_create(&Reduce16<HalfToFloat, FloatToHalf, kSumK>, 1, &g_half_ops[kSumK]);
  MPI_Op_create(&Reduce16<HalfToFloat, FloatToHalf, kMinK>, 1, &g_half_ops[kMinK]);
  MPI_Op_create(&Reduce16<HalfToFloat, FloatToHalf, kMaxK>, 1, &g_half_ops[kMaxK]);
  MPI_Op_create(&Reduce16<HalfToFloat, FloatToHalf, kProdK>, 1, &g_half_ops[kProdK]);
  MPI_Op_create(&Reduce16<BFloat16ToFloat, FloatToBFloat16, kSumK>, 1, &g_bf16_ops[kSumK]);
  MPI_Op_create(&Reduce16<BFloat16ToFloat, FloatToBFloat16, kMinK>, 1, &g_bf16_ops[kMinK]);
  MPI_Op_create(&Reduce16<BFloat16ToFloat, FloatToBFloat16, kMaxK>, 1, &g_bf16_ops[kMaxK]);
  MPI_Op_create(&Reduce16<BFloat16ToFloat, FloatToBFloat16, kProdK>, 1, &g_bf16_ops[kProdK]);
}

void FreeCustomMpiOps() {
  for (MPI_Op* ops : {g_half_ops, g_bf16_ops}) {
    for (int k = 0; k < kNumKinds; ++k) {
      if (ops[k] != MPI_OP_NULL) MPI_Op_free(&ops[k]);
    }
  }
}

MPI_Datatype MpiDatatype(DataType dtype) {
  switch (dtype) {
    case DataType::kUint8: return MPI_UINT8_T;
    case DataType::kInt8: return MPI_INT8_T;
    case DataType::kInt32: return MPI_INT32_T;
    case DataType::kInt64: return MPI_INT64_T;
    case DataType::kFloat16:
    case DataType::kBFloat16: return MPI_UINT16_T;
    case DataType::kFloat32: return MPI_FLOAT;
    case DataType::kFloat64: return MPI_DOUBLE;
    case DataType::kBool: return MPI_C_BOOL;
    case DataType::kUint16: return MPI_UINT16_T;
    case DataType::kInt16: return MPI_INT16_T;
  }
  return MPI_BYTE;
}

MPI_Op MpiReduceOp(ReduceOp op, DataType dtype) {
  if (dtype == DataType::kFloat16) return g_half_ops[KindOf(op)];
  if (dtype == DataType::kBFloat16) return g_bf16_ops[KindOf(op)];
  switch (op) {
    case ReduceOp::kMin: return MPI_MIN;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kProduct: return MPI_PROD;
    default: return MPI_SUM;
  }
}

}  // namespace tf_ring
