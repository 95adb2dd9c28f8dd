#include "common/transport/mpi_types.h"

#include <algorithm>
#include <cstdint>

#include "common/base/half.h"

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

// Open MPI's AVX op component sums (and multiplies) 8- and 16-bit integers
// with saturating vector instructions (open-mpi/ompi#8045), so past 16
// elements an overflowing Sum clamps instead of wrapping like TensorFlow and
// the engine's own ring kernels. These ops wrap (unsigned arithmetic, cast back).
template <typename T, typename U, int K>
void ReduceSmallInt(void* in, void* inout, int* len, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) {
    U x = static_cast<U>(a[i]), y = static_cast<U>(b[i]);
    b[i] = static_cast<T>(K == kSumK ? static_cast<U>(x + y) : static_cast<U>(x * y));
  }
}

constexpr int kNumSmallInts = 4;  // int8, uint8, int16, uint16
MPI_Op g_small_int_sum[kNumSmallInts] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
MPI_Op g_small_int_prod[kNumSmallInts] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};

int SmallIntIndex(DataType dtype) {
  switch (dtype) {
    case DataType::kInt8: return 0;
    case DataType::kUint8: return 1;
    case DataType::kInt16: return 2;
    case DataType::kUint16: return 3;
    default: return -1;
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
  MPI_Op_create(&ReduceSmallInt<int8_t, uint32_t, kSumK>, 1, &g_small_int_sum[0]);
  MPI_Op_create(&ReduceSmallInt<uint8_t, uint32_t, kSumK>, 1, &g_small_int_sum[1]);
  MPI_Op_create(&ReduceSmallInt<int16_t, uint32_t, kSumK>, 1, &g_small_int_sum[2]);
  MPI_Op_create(&ReduceSmallInt<uint16_t, uint32_t, kSumK>, 1, &g_small_int_sum[3]);
  MPI_Op_create(&ReduceSmallInt<int8_t, uint32_t, kProdK>, 1, &g_small_int_prod[0]);
  MPI_Op_create(&ReduceSmallInt<uint8_t, uint32_t, kProdK>, 1, &g_small_int_prod[1]);
  MPI_Op_create(&ReduceSmallInt<int16_t, uint32_t, kProdK>, 1, &g_small_int_prod[2]);
  MPI_Op_create(&ReduceSmallInt<uint16_t, uint32_t, kProdK>, 1, &g_small_int_prod[3]);
}

void FreeCustomMpiOps() {
  for (MPI_Op* ops : {g_half_ops, g_bf16_ops}) {
    for (int k = 0; k < kNumKinds; ++k) {
      if (ops[k] != MPI_OP_NULL) MPI_Op_free(&ops[k]);
    }
  }
  for (MPI_Op* ops : {g_small_int_sum, g_small_int_prod}) {
    for (int k = 0; k < kNumSmallInts; ++k) {
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
  int small = SmallIntIndex(dtype);
  if (small >= 0 && KindOf(op) == kSumK) return g_small_int_sum[small];
  if (small >= 0 && KindOf(op) == kProdK) return g_small_int_prod[small];
  switch (op) {
    case ReduceOp::kMin: return MPI_MIN;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kProduct: return MPI_PROD;
    default: return MPI_SUM;
  }
}

}  // namespace tf_ring
