// Output shapes of the shape-changing collectives when XLA compiles them:
// XLA needs every shape before any rank has run, so each rule assumes the
// same first dimension on every rank (the coordinator checks that at run
// time, see Request::static_shape) and mirrors the engine's split rule.
#ifndef TF_RING_XLA_OPS_STATIC_SHAPES_H_
#define TF_RING_XLA_OPS_STATIC_SHAPES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/base/message.h"

namespace tf_ring {
namespace xla_ops {

// This rank's place in the process set the op runs on.
struct SetPosition {
  int size = 0;   // ranks in the set
  int index = 0;  // this rank's position among them (its rank in the set)
};

// Fills *pos from the running engine; returns an error text (naming the
// tensor) when tf_ring is not initialized or this rank is not in the set.
std::string LookUpSetPosition(int process_set, const std::string& tensor, SetPosition* pos);

// Output 0's dimensions for `op` on input `dims`; returns an error text
// naming `tensor` when XLA cannot compile it. `splits` (alltoall only): the
// compile-time splits, empty for an equal split.
std::string StaticOutputDims(OpType op, const std::string& tensor, const std::vector<int64_t>& dims,
                             const std::vector<int64_t>& splits, const SetPosition& pos,
                             std::vector<int64_t>* out);

}  // namespace xla_ops
}  // namespace tf_ring

#endif  // TF_RING_XLA_OPS_STATIC_SHAPES_H_
