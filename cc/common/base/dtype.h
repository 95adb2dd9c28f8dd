// Element types the engine moves. Values are part of the wire format.
#ifndef TF_RING_COMMON_DTYPE_H_
#define TF_RING_COMMON_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace tf_ring {

enum class DataType : uint8_t {
  kUint8 = 0,
  kInt8 = 1,
  kInt32 = 2,
  kInt64 = 3,
  kFloat16 = 4,
  kBFloat16 = 5,
  kFloat32 = 6,
  kFloat64 = 7,
  kBool = 8,
  kUint16 = 9,
  kInt16 = 10,
};

size_t DataTypeSize(DataType dtype);
const char* DataTypeName(DataType dtype);
bool IsValidDataType(uint8_t raw);
// Types that Sum/Min/Max/Product/Average are defined on.
bool IsReducible(DataType dtype);
bool IsFloatingPoint(DataType dtype);

}  // namespace tf_ring

#endif  // TF_RING_COMMON_DTYPE_H_
