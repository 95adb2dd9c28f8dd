// In-place scaling of reduction buffers (prescale, postscale, Average).
#ifndef TF_RING_COMMON_SCALE_H_
#define TF_RING_COMMON_SCALE_H_

#include <cstdint>

#include "common/base/dtype.h"

namespace tf_ring {

// Multiplies `count` elements by `factor`. Floating types scale in their own
// precision (float16/bfloat16 via float32); integer types scale in double and
// truncate toward zero. A factor of exactly 1 is a no-op.
void ScaleBuffer(void* data, int64_t count, DataType dtype, double factor);

// Integer Average: exact division, truncating toward zero (no double rounding).
void DivideIntegers(void* data, int64_t count, DataType dtype, int64_t divisor);

}  // namespace tf_ring

#endif  // TF_RING_COMMON_SCALE_H_
