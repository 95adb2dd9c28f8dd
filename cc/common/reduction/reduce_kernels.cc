#include "common/reduction/reduce_kernels.h"

#include <algorithm>
#include <limits>

#include "common/base/half.h"

namespace tf_ring {

namespace {

// Plain loops the compiler vectorizes (dst may alias a, so no restrict).
template <typename T, typename F>
void Loop(void* dst, const void* a, const void* b, int64_t n, F f) {
  T* d = static_cast<T*>(dst);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (int64_t i = 0; i < n; ++i) d[i] = f(x[i], y[i]);
}

template <typename T>
void ReduceTyped(void* dst, const void* a, const void* b, int64_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
    case ReduceOp::kAdasum: Loop<T>(dst, a, b, n, [](T x, T y) { return static_cast<T>(x + y); }); break;
    case ReduceOp::kMin: Loop<T>(dst, a, b, n, [](T x, T y) { return std::min(x, y); }); break;
    case ReduceOp::kMax: Loop<T>(dst, a, b, n, [](T x, T y) { return std::max(x, y); }); break;
    case ReduceOp::kProduct: Loop<T>(dst, a, b, n, [](T x, T y) { return static_cast<T>(x * y); }); break;
  }
}

// One sweep, two destinations: the shared-memory allreduce's reduced slice
// goes to the copy its peers read and to this rank's output without a
// second pass over memory.
template <typename T, typename S, typename F>
void LoopBoth(void* dst, void* copy, const void* a, const void* b, int64_t n, S factor, F f) {
  T* d = static_cast<T*>(dst);
  T* c = static_cast<T*>(copy);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  if (factor == S(1)) {
    for (int64_t i = 0; i < n; ++i) d[i] = c[i] = f(x[i], y[i]);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const T v = f(x[i], y[i]);
    d[i] = c[i] = static_cast<T>(v * factor);  // rounded as ScaleBuffer rounds it
  }
}

template <typename T, typename S>
void ReduceBothTyped(void* dst, void* copy, const void* a, const void* b, int64_t n, ReduceOp op,
                     S factor) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
    case ReduceOp::kAdasum:
      LoopBoth<T>(dst, copy, a, b, n, factor, [](T x, T y) { return static_cast<T>(x + y); });
      break;
    case ReduceOp::kMin: LoopBoth<T>(dst, copy, a, b, n, factor, [](T x, T y) { return std::min(x, y); }); break;
    case ReduceOp::kMax: LoopBoth<T>(dst, copy, a, b, n, factor, [](T x, T y) { return std::max(x, y); }); break;
    case ReduceOp::kProduct:
      LoopBoth<T>(dst, copy, a, b, n, factor, [](T x, T y) { return static_cast<T>(x * y); });
      break;
  }
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void Reduce16(void* dst, const void* a, const void* b, int64_t n, ReduceOp op) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  for (int64_t i = 0; i < n; ++i) {
    float fx = ToFloat(x[i]), fy = ToFloat(y[i]);
    float r = op == ReduceOp::kMin ? std::min(fx, fy)
              : op == ReduceOp::kMax ? std::max(fx, fy)
              : op == ReduceOp::kProduct ? fx * fy
                                         : fx + fy;
    d[i] = FromFloat(r);
  }
}

template <typename T>
T IdentityOf(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
    case ReduceOp::kAdasum: return T(0);  // a zero vector leaves Adasum's result unchanged
    case ReduceOp::kProduct: return T(1);
    case ReduceOp::kMin:
      return std::numeric_limits<T>::has_infinity ? std::numeric_limits<T>::infinity()
                                                  : std::numeric_limits<T>::max();
    case ReduceOp::kMax:
      return std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                  : std::numeric_limits<T>::lowest();
  }
  return T(0);
}

template <typename T>
void Fill(void* buf, int64_t n, T value) {
  T* d = static_cast<T*>(buf);
  for (int64_t i = 0; i < n; ++i) d[i] = value;
}

}  // namespace

void FillIdentity(void* buf, int64_t count, DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::kFloat32: Fill(buf, count, IdentityOf<float>(op)); break;
    case DataType::kFloat64: Fill(buf, count, IdentityOf<double>(op)); break;
    case DataType::kInt32: Fill(buf, count, IdentityOf<int32_t>(op)); break;
    case DataType::kInt64: Fill(buf, count, IdentityOf<int64_t>(op)); break;
    case DataType::kUint8: Fill(buf, count, IdentityOf<uint8_t>(op)); break;
    case DataType::kInt8: Fill(buf, count, IdentityOf<int8_t>(op)); break;
    case DataType::kUint16: Fill(buf, count, IdentityOf<uint16_t>(op)); break;
    case DataType::kInt16: Fill(buf, count, IdentityOf<int16_t>(op)); break;
    case DataType::kFloat16: Fill(buf, count, FloatToHalf(IdentityOf<float>(op))); break;
    case DataType::kBFloat16: Fill(buf, count, FloatToBFloat16(IdentityOf<float>(op))); break;
    case DataType::kBool: Fill(buf, count, static_cast<uint8_t>(0)); break;
  }
}

void ReduceInto(void* dst, const void* a, const void* b, int64_t count, DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::kFloat32: ReduceTyped<float>(dst, a, b, count, op); break;
    case DataType::kFloat64: ReduceTyped<double>(dst, a, b, count, op); break;
    case DataType::kInt32: ReduceTyped<int32_t>(dst, a, b, count, op); break;
    case DataType::kInt64: ReduceTyped<int64_t>(dst, a, b, count, op); break;
    case DataType::kUint8: ReduceTyped<uint8_t>(dst, a, b, count, op); break;
    case DataType::kInt8: ReduceTyped<int8_t>(dst, a, b, count, op); break;
    case DataType::kUint16: ReduceTyped<uint16_t>(dst, a, b, count, op); break;
    case DataType::kInt16: ReduceTyped<int16_t>(dst, a, b, count, op); break;
    case DataType::kFloat16: Reduce16<HalfToFloat, FloatToHalf>(dst, a, b, count, op); break;
    case DataType::kBFloat16: Reduce16<BFloat16ToFloat, FloatToBFloat16>(dst, a, b, count, op); break;
    case DataType::kBool: break;
  }
}

bool ReducesIntoBoth(DataType dtype, double factor) {
  switch (dtype) {
    case DataType::kFloat32:
    case DataType::kFloat64: return true;
    case DataType::kInt32:
    case DataType::kInt64:
    case DataType::kUint8:
    case DataType::kInt8:
    case DataType::kUint16:
    case DataType::kInt16: return factor == 1.0;  // else ScaleBuffer's double-and-truncate
    default: return false;
  }
}

void ReduceScaleIntoBoth(void* dst, void* copy, const void* a, const void* b, int64_t count,
                         DataType dtype, ReduceOp op, double factor) {
  switch (dtype) {
    case DataType::kFloat32: ReduceBothTyped<float>(dst, copy, a, b, count, op, static_cast<float>(factor)); break;
    case DataType::kFloat64: ReduceBothTyped<double>(dst, copy, a, b, count, op, factor); break;
    case DataType::kInt32: ReduceBothTyped<int32_t>(dst, copy, a, b, count, op, 1); break;
    case DataType::kInt64: ReduceBothTyped<int64_t>(dst, copy, a, b, count, op, 1); break;
    case DataType::kUint8: ReduceBothTyped<uint8_t>(dst, copy, a, b, count, op, 1); break;
    case DataType::kInt8: ReduceBothTyped<int8_t>(dst, copy, a, b, count, op, 1); break;
    case DataType::kUint16: ReduceBothTyped<uint16_t>(dst, copy, a, b, count, op, 1); break;
    case DataType::kInt16: ReduceBothTyped<int16_t>(dst, copy, a, b, count, op, 1); break;
    default: break;  // not covered: see ReducesIntoBoth
  }
}

}  // namespace tf_ring
