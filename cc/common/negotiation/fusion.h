// Packs agreed responses into fused batches: same collective, dtype, reduce
// op, scale factors (and root), up to a byte threshold. Pure function of its
// inputs, so every rank computes the same batches.
#ifndef TF_RING_COMMON_FUSION_H_
#define TF_RING_COMMON_FUSION_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "common/base/message.h"
#include "common/negotiation/tensor_queue.h"

namespace tf_ring {

// `bytes_of` returns a response's total payload bytes (identical on all
// ranks). A threshold of 0 disables fusion; larger tensors run alone.
std::vector<Response> FuseResponses(std::vector<Response> responses, int64_t threshold,
                                    const std::function<int64_t(const Response&)>& bytes_of);

// Payload bytes of a response as all `size` ranks see them (fusion must
// agree), from this rank's entries in `queue`.
int64_t ResponsePayloadBytes(const Response& resp, TensorQueue* queue, int size);

}  // namespace tf_ring

#endif  // TF_RING_COMMON_FUSION_H_
