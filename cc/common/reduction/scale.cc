#include "common/reduction/scale.h"

#include "common/base/half.h"

namespace tf_ring {

namespace {
template <typename T, typename F>
void ScaleAs(void* data, int64_t count, F factor) {
  T* p = static_cast<T*>(data);
  for (int64_t i = 0; i < count; ++i) p[i] = static_cast<T>(p[i] * factor);
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void Scale16(void* data, int64_t count, float factor) {
  uint16_t* p = static_cast<uint16_t*>(data);
  for (int64_t i = 0; i < count; ++i) p[i] = FromFloat(ToFloat(p[i]) * factor);
}

template <typename T>
void Divide(void* data, int64_t count, int64_t divisor) {
  T* p = static_cast<T*>(data);
  for (int64_t i = 0; i < count; ++i) p[i] = static_cast<T>(p[i] / divisor);
}
}  // namespace

void ScaleBuffer(void* data, int64_t count, DataType dtype, double factor) {
  if (factor == 1.0 || count == 0) return;
  switch (dtype) {
    case DataType::kFloat32: ScaleAs<float>(data, count, static_cast<float>(factor)); break;
    case DataType::kFloat64: ScaleAs<double>(data, count, factor); break;
    case DataType::kFloat16: Scale16<HalfToFloat, FloatToHalf>(data, count, static_cast<float>(factor)); break;
    case DataType::kBFloat16:
      Scale16<BFloat16ToFloat, FloatToBFloat16>(data, count, static_cast<float>(factor));
      break;
    case DataType::kInt32: ScaleAs<int32_t>(data, count, factor); break;
    case DataType::kInt64: ScaleAs<int64_t>(data, count, factor); break;
    case DataType::kUint8: ScaleAs<uint8_t>(data, count, factor); break;
    case DataType::kInt8: ScaleAs<int8_t>(data, count, factor); break;
    case DataType::kUint16: ScaleAs<uint16_t>(data, count, factor); break;
    case DataType::kInt16: ScaleAs<int16_t>(data, count, factor); break;
    case DataType::kBool: break;
  }
}

void DivideIntegers(void* data, int64_t count, DataType dtype, int64_t divisor) {
  if (divisor == 1) return;
  switch (dtype) {
    case DataType::kInt32: Divide<int32_t>(data, count, divisor); break;
    case DataType::kInt64: Divide<int64_t>(data, count, divisor); break;
    case DataType::kUint8: Divide<uint8_t>(data, count, divisor); break;
    case DataType::kInt8: Divide<int8_t>(data, count, divisor); break;
    case DataType::kUint16: Divide<uint16_t>(data, count, divisor); break;
    case DataType::kInt16: Divide<int16_t>(data, count, divisor); break;
    default: break;
  }
}

}  // namespace tf_ring
