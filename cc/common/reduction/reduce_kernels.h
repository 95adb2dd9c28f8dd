// Elementwise reductions on raw buffers: dst = a (op) b. Used by the
// shared-memory transport, where this process does the arithmetic itself.
#ifndef TF_RING_COMMON_REDUCE_KERNELS_H_
#define TF_RING_COMMON_REDUCE_KERNELS_H_

#include <cstdint>

#include "common/base/dtype.h"
#include "common/base/message.h"

namespace tf_ring {

// `dst` may alias `a`. Average combines like Sum (scaling happens after).
void ReduceInto(void* dst, const void* a, const void* b, int64_t count, DataType dtype, ReduceOp op);

// The last pass of a reduction written to two places in one sweep:
// dst = copy = (a (op) b) * factor, each value computed exactly as
// ReduceInto followed by ScaleBuffer would. Only where ReducesIntoBoth says
// so: float32 and float64 with any factor, the integer types with a factor
// of 1 (the rest reduce, scale and copy in turn). `dst` may alias `a`;
// `copy` may alias `a` or `b` element for element.
bool ReducesIntoBoth(DataType dtype, double factor);
void ReduceScaleIntoBoth(void* dst, void* copy, const void* a, const void* b, int64_t count,
                         DataType dtype, ReduceOp op, double factor);

// Fills `buf` with the value that leaves `op` unchanged (0 for Sum and
// Average, 1 for Product, the largest value for Min, the lowest for Max).
void FillIdentity(void* buf, int64_t count, DataType dtype, ReduceOp op);

}  // namespace tf_ring

#endif  // TF_RING_COMMON_REDUCE_KERNELS_H_
