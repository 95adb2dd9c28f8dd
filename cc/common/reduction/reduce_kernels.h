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

// Fills `buf` with the value that leaves `op` unchanged (0 for Sum and
// Average, 1 for Product, the largest value for Min, the lowest for Max).
void FillIdentity(void* buf, int64_t count, DataType dtype, ReduceOp op);

}  // namespace tf_ring

#endif  // TF_RING_COMMON_REDUCE_KERNELS_H_
