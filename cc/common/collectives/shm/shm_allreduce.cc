#include "common/collectives/shm/shm_allreduce.h"

#include <algorithm>
#include <cstring>

#include "common/reduction/reduce_kernels.h"
#include "common/reduction/scale.h"
#include "common/transport/peer_failure.h"

namespace tf_ring {

namespace {

// Walks [begin, begin + bytes) of the virtual buffer, calling
// fn(span, offset_in_span, offset_in_range, length) for each piece.
template <typename F>
void ForEachPiece(const std::vector<Span>& spans, int64_t begin, int64_t bytes, F fn) {
  int64_t span_start = 0;
  const int64_t end = begin + bytes;
  for (const Span& s : spans) {
    const int64_t span_end = span_start + s.bytes;
    if (span_end > begin && span_start < end) {
      const int64_t lo = std::max(begin, span_start), hi = std::min(end, span_end);
      fn(s, lo - span_start, lo - begin, hi - lo);
    }
    if (span_end >= end) break;
    span_start = span_end;
  }
}

}  // namespace

Status ShmAllreduce(ShmSegment* shm, const std::vector<Span>& spans, const ReduceSpec& spec,
                    const AcrossHosts& across, size_t chunk_bytes) {
  const int me = shm->rank(), n = shm->size();
  const int64_t elem = static_cast<int64_t>(DataTypeSize(spec.dtype));
  int64_t total_bytes = 0;
  for (const Span& s : spans) total_bytes += s.bytes;
  const int64_t total = total_bytes / elem;
  if (chunk_bytes == 0 || chunk_bytes > shm->area_bytes()) chunk_bytes = shm->area_bytes();
  const int64_t chunk_elems = static_cast<int64_t>(chunk_bytes) / elem;
  Status status;
  // The one-sweep finish needs nothing between the local reduction and the
  // output: no other hosts to combine with, no exact integer division.
  const bool one_sweep = !across && n > 1 && spec.integer_divisor <= 1 &&
                         ReducesIntoBoth(spec.dtype, spec.postscale);

  for (int64_t first = 0, chunk = 0; first < total; first += chunk_elems, ++chunk) {
    const int64_t len = std::min(chunk_elems, total - first);
    const int buffer = static_cast<int>(chunk & 1);
    auto slice_begin = [&](int q) { return len * q / n; };
    auto slice_len = [&](int q) { return slice_begin(q + 1) - slice_begin(q); };

    // 1. Stage the slices that the other ranks reduce. This rank's own
    // slice is read in place: its output is written only after the reduction.
    char* staging = shm->input_area(me, buffer);
    for (int q = 0; q < n; ++q) {
      if (q == me) continue;
      ForEachPiece(spans, (first + slice_begin(q)) * elem, slice_len(q) * elem,
                   [&](const Span& s, int64_t at, int64_t rel, int64_t k) {
                     std::memcpy(staging + slice_begin(q) * elem + rel, s.in + at, k);
                   });
    }
    if (!shm->Barrier()) return PeerLostStatus();  // a local rank died

    // 2. Reduce this rank's slice into its published copy (combining with
    // the other hosts' when there are any), scale it, write it out. With
    // nothing to do between the last local pass and the output, that pass
    // writes both at once (one sweep over memory fewer).
    const int64_t mine = slice_begin(me) * elem;
    char* published = shm->result_area(me, buffer) + mine;
    ForEachPiece(spans, first * elem + mine, slice_len(me) * elem,
                 [&](const Span& s, int64_t at, int64_t rel, int64_t k) {
                   // Always combine in rank order, whoever reduces: results
                   // are then bit-identical however tensors are fused or sliced.
                   char* dst = published + rel;
                   auto source = [&](int q) -> const char* {
                     if (q == me) return s.in + at;
                     return shm->input_area(q, buffer) + mine + rel;
                   };
                   if (n == 1) {
                     std::memcpy(dst, s.in + at, k);
                     return;
                   }
                   const char* first_source = source(0);
                   for (int q = 1; q < n - 1; ++q) {
                     ReduceInto(dst, first_source, source(q), k / elem, spec.dtype, spec.op);
                     first_source = dst;
                   }
                   if (one_sweep) {
                     ReduceScaleIntoBoth(dst, s.out + at, first_source, source(n - 1), k / elem,
                                         spec.dtype, spec.op, spec.postscale);
                   } else {
                     ReduceInto(dst, first_source, source(n - 1), k / elem, spec.dtype, spec.op);
                   }
                 });
    if (!one_sweep) {
      if (across) {
        Status s = across(published, slice_len(me));
        if (status.ok()) status = s;  // keep going: the other ranks' barriers wait for this one
      }
      if (spec.integer_divisor > 1) DivideIntegers(published, slice_len(me), spec.dtype, spec.integer_divisor);
      ScaleBuffer(published, slice_len(me), spec.dtype, spec.postscale);
      ForEachPiece(spans, first * elem + mine, slice_len(me) * elem,
                   [&](const Span& s, int64_t at, int64_t rel, int64_t k) {
                     std::memcpy(s.out + at, published + rel, k);
                   });
    }
    if (!shm->Barrier()) return PeerLostStatus();  // a local rank died

    // 3. Copy the other ranks' reduced slices out.
    for (int q = 0; q < n; ++q) {
      if (q == me) continue;
      const char* result = shm->result_area(q, buffer) + slice_begin(q) * elem;
      ForEachPiece(spans, (first + slice_begin(q)) * elem, slice_len(q) * elem,
                   [&](const Span& s, int64_t at, int64_t rel, int64_t k) {
                     std::memcpy(s.out + at, result + rel, k);
                   });
    }
  }
  return status;
}

}  // namespace tf_ring
