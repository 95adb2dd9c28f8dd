#include "common/collectives/shm/shm_small_allreduce.h"

#include <cstring>

#include "common/reduction/reduce_kernels.h"
#include "common/reduction/scale.h"
#include "common/transport/peer_failure.h"

namespace tf_ring {

// The limit is the small area's size, chosen where one barrier less stops
// beating split arithmetic (benchmarks/README.md, "Small tensors in one
// barrier").
bool UseSmallShmAllreduce(const ShmSegment& shm, int64_t bytes) {
  return shm.size() > 1 && static_cast<size_t>(bytes) <= ShmSegment::small_area_bytes();
}

Status ShmSmallAllreduce(ShmSegment* shm, const std::vector<Span>& spans, const ReduceSpec& spec) {
  const int n = shm->size();
  const int64_t elem = static_cast<int64_t>(DataTypeSize(spec.dtype));
  // Each call takes the other buffer than the call before. A buffer is
  // written again two calls later, after this rank passed a barrier in
  // between, that is after every peer finished reading it.
  const int buffer = shm->NextSmallBuffer();
  char* staging = shm->small_area(shm->rank(), buffer);
  int64_t offset = 0;
  for (const Span& s : spans) {
    std::memcpy(staging + offset, s.in, s.bytes);
    offset += s.bytes;
  }
  if (!shm->Barrier()) return PeerLostStatus();  // a local rank died

  // Own input included from its staged copy: the output may alias it.
  offset = 0;
  for (const Span& s : spans) {
    const int64_t count = s.bytes / elem;
    auto source = [&](int q) -> const char* { return shm->small_area(q, buffer) + offset; };
    ReduceInto(s.out, source(0), source(1), count, spec.dtype, spec.op);
    for (int q = 2; q < n; ++q) ReduceInto(s.out, s.out, source(q), count, spec.dtype, spec.op);
    if (spec.integer_divisor > 1) DivideIntegers(s.out, count, spec.dtype, spec.integer_divisor);
    ScaleBuffer(s.out, count, spec.dtype, spec.postscale);
    offset += s.bytes;
  }
  return Status::OK();
}

}  // namespace tf_ring
