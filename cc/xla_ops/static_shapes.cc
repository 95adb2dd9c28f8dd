#include "xla_ops/static_shapes.h"

#include <algorithm>

#include "common/engine.h"

namespace tf_ring {
namespace xla_ops {

namespace {

std::string Head(OpType op, const std::string& tensor) {
  return std::string("tf_ring: ") + OpTypeName(op) + " of tensor '" + tensor +
         "' cannot compile inside jit_compile (XLA): ";
}

std::string Outside(OpType op) {
  return std::string(" or call ") + OpTypeName(op) + " outside jit_compile.";
}

}  // namespace

std::string LookUpSetPosition(int process_set, const std::string& tensor, SetPosition* pos) {
  std::vector<int> ranks;
  if (!Engine::Get().ProcessSetRanks(process_set, &ranks)) {
    return "tf_ring: cannot compile the collective on tensor '" + tensor + "': " +
           (Engine::Get().started() ? "process set " + std::to_string(process_set) +
                                          " does not exist (was it removed?)"
                                    : std::string("tf_ring is not initialized; call "
                                                  "tf_ring.init() before compiling"));
  }
  const int me = Engine::Get().topology().rank;
  auto it = std::find(ranks.begin(), ranks.end(), me);
  if (it == ranks.end()) {
    return "tf_ring: cannot compile the collective on tensor '" + tensor + "': rank " +
           std::to_string(me) + " is not a member of process set " + std::to_string(process_set) +
           "; run it only on the set's ranks";
  }
  pos->size = static_cast<int>(ranks.size());
  pos->index = static_cast<int>(it - ranks.begin());
  return std::string();
}

std::string StaticOutputDims(OpType op, const std::string& tensor, const std::vector<int64_t>& dims,
                             const std::vector<int64_t>& splits, const SetPosition& pos,
                             std::vector<int64_t>* out) {
  *out = dims;
  if (op != OpType::kAllgather && op != OpType::kAlltoall && op != OpType::kReducescatter)
    return std::string();
  if (dims.empty())
    return Head(op, tensor) + "it needs a tensor of rank 1 or more, got a scalar; reshape it to [1].";
  const int64_t rows = dims[0];
  const int64_t size = pos.size;
  switch (op) {
    case OpType::kAllgather:
      // Every rank must bring `rows` rows (checked when it runs).
      (*out)[0] = rows * size;
      return std::string();
    case OpType::kReducescatter:
      // The engine's rule: the first rows % size ranks get one extra row.
      (*out)[0] = rows / size + (pos.index < rows % size ? 1 : 0);
      return std::string();
    case OpType::kAlltoall: {
      if (rows % size != 0)
        return Head(op, tensor) + "its first dimension " + std::to_string(rows) +
               " does not divide by the " + std::to_string(size) +
               " ranks, and XLA needs the received shape at compile time, so only an equal split "
               "compiles. Pad the rows to a multiple of the number of ranks," + Outside(op);
      for (int64_t s : splits) {
        if (static_cast<int64_t>(splits.size()) != size || s != rows / size) {
          std::string text;
          for (int64_t v : splits) text += (text.empty() ? "" : ", ") + std::to_string(v);
          return Head(op, tensor) + "splits [" + text + "] are not an equal split of " +
                 std::to_string(rows) + " rows over " + std::to_string(size) +
                 " ranks; with other splits the received shape depends on other ranks, which XLA "
                 "cannot know at compile time. Omit splits= (equal split)," + Outside(op);
        }
      }
      return std::string();  // size * rows / size rows arrive
    }
    default:
      return std::string();
  }
}

}  // namespace xla_ops
}  // namespace tf_ring
