// What a joined rank contributes to a collective it never submitted: an
// input holding the reduction's identity (zeros for Sum and Average) and
// outputs it throws away. The shapes come from the response, which carries
// them while any rank has joined.
#ifndef TF_RING_COMMON_JOINED_STAND_IN_H_
#define TF_RING_COMMON_JOINED_STAND_IN_H_

#include <deque>
#include <vector>

#include "common/base/message.h"
#include "common/base/tensor_entry.h"

namespace tf_ring {

class StandInStore {
 public:
  // An entry for tensor `index` of `resp`; its buffers live until Clear().
  TensorEntry Make(const Response& resp, size_t index);
  void Clear() { buffers_.clear(); }

 private:
  char* Allocate(int64_t bytes);

  std::deque<std::vector<char>> buffers_;
};

}  // namespace tf_ring

#endif  // TF_RING_COMMON_JOINED_STAND_IN_H_
