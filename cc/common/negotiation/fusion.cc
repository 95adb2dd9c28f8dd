#include "common/negotiation/fusion.h"

namespace tf_ring {

namespace {
bool Fusable(const Response& r) {
  // Joined-mode responses run alone: joined ranks cannot size them locally.
  // Adasum's dot products belong to one tensor, so it never fuses.
  return !r.is_error() && !r.has_joined_ranks() && r.reduce_op != ReduceOp::kAdasum &&
         (r.op == OpType::kAllreduce || r.op == OpType::kAllgather || r.op == OpType::kBroadcast);
}

bool SameBatchKey(const Response& a, const Response& b) {
  return a.op == b.op && a.dtype == b.dtype && a.reduce_op == b.reduce_op &&
         a.prescale == b.prescale && a.postscale == b.postscale && a.root_rank == b.root_rank &&
         a.gpu == b.gpu;
}
}  // namespace

std::vector<Response> FuseResponses(std::vector<Response> responses, int64_t threshold,
                                    const std::function<int64_t(const Response&)>& bytes_of) {
  if (threshold <= 0 || responses.size() < 2) return responses;
  std::vector<Response> out;
  std::vector<int64_t> batch_bytes;  // parallel to `out`
  out.reserve(responses.size());
  for (Response& r : responses) {
    const int64_t bytes = Fusable(r) ? bytes_of(r) : threshold + 1;
    bool placed = false;
    if (bytes <= threshold) {
      for (size_t i = out.size(); i-- > 0;) {
        if (Fusable(out[i]) && SameBatchKey(out[i], r) && batch_bytes[i] + bytes <= threshold) {
          out[i].names.insert(out[i].names.end(), r.names.begin(), r.names.end());
          out[i].sizes.insert(out[i].sizes.end(), r.sizes.begin(), r.sizes.end());
          batch_bytes[i] += bytes;
          placed = true;
          break;
        }
      }
    }
    if (!placed) {
      out.push_back(std::move(r));
      batch_bytes.push_back(bytes);
    }
  }
  return out;
}

int64_t ResponsePayloadBytes(const Response& resp, TensorQueue* queue, int size) {
  int64_t total = 0;
  for (size_t t = 0; t < resp.names.size(); ++t) {
    std::vector<int64_t> shape;
    DataType dtype;
    if (!queue->Describe(resp.names[t], &shape, &dtype)) continue;
    int64_t elements = 1;
    for (size_t d = resp.op == OpType::kAllgather ? 1 : 0; d < shape.size(); ++d) elements *= shape[d];
    if (resp.op == OpType::kAllgather) {
      int64_t rows = 0;
      for (int r = 0; r < size; ++r) rows += resp.sizes[t * size + r];
      elements *= rows;
    }
    total += elements * static_cast<int64_t>(DataTypeSize(dtype));
  }
  return total;
}

}  // namespace tf_ring
