#include "common/negotiation/joined_stand_in.h"

#include "common/reduction/reduce_kernels.h"

namespace tf_ring {

namespace {
// resp.shapes holds [ndims, dims...] per tensor, back to back.
std::vector<int64_t> ShapeOf(const Response& resp, size_t index) {
  size_t pos = 0;
  for (size_t t = 0; t < index && pos < resp.shapes.size(); ++t) pos += 1 + resp.shapes[pos];
  if (pos >= resp.shapes.size()) return {};
  const int64_t ndims = resp.shapes[pos];
  return std::vector<int64_t>(resp.shapes.begin() + pos + 1, resp.shapes.begin() + pos + 1 + ndims);
}
}  // namespace

char* StandInStore::Allocate(int64_t bytes) {
  buffers_.emplace_back(static_cast<size_t>(bytes > 0 ? bytes : 1), 0);
  return buffers_.back().data();
}

TensorEntry StandInStore::Make(const Response& resp, size_t index) {
  TensorEntry e;
  e.name = resp.names[index];
  e.op = resp.op;
  e.dtype = resp.dtype;
  e.shape = ShapeOf(resp, index);
  // A joined rank sends no rows to an allgather.
  if (resp.op == OpType::kAllgather && !e.shape.empty()) e.shape[0] = 0;
  char* data = Allocate(e.NumBytes());
  if (resp.op == OpType::kAllreduce) FillIdentity(data, e.NumElements(), e.dtype, resp.reduce_op);
  e.input = data;
  e.output = data;
  const int64_t element_bytes = static_cast<int64_t>(DataTypeSize(e.dtype));
  e.allocate_output = [this, element_bytes](int, const std::vector<int64_t>& shape, void** out) {
    int64_t elements = 1;
    for (int64_t d : shape) elements *= d;
    *out = Allocate(elements * element_bytes);
    return Status::OK();
  };
  e.done = [](const Status&) {};
  return e;
}

}  // namespace tf_ring
