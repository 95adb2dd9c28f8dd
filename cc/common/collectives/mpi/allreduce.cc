// Allreduce of one tensor (in place in its output) or of a fused batch
// (packed into scratch, reduced once, unpacked).
#include <cstring>
#include <optional>

#include "common/collectives/collectives.h"
#include "common/collectives/shm/shm_allreduce.h"
#include "common/collectives/shm/shm_single_copy_allreduce.h"
#include "common/collectives/shm/shm_small_allreduce.h"
#include "common/transport/mpi_types.h"
#include "common/reduction/scale.h"
#include "common/transport/peer_failure.h"

namespace tf_ring {

namespace {
// Average divides by the ranks that contributed: joined ranks add nothing.
int AverageDivisor(const Response& resp, int size) {
  return resp.has_joined_ranks() ? resp.contributors : size;
}

void ApplyPostscale(void* buf, int64_t count, const Response& resp, int size) {
  size = AverageDivisor(resp, size);
  double factor = resp.postscale;
  if (resp.reduce_op == ReduceOp::kAverage) {
    if (IsFloatingPoint(resp.dtype)) {
      factor /= size;
    } else {
      DivideIntegers(buf, count, resp.dtype, size);
    }
  }
  ScaleBuffer(buf, count, resp.dtype, factor);
}
}  // namespace

// Same node, or hierarchical across hosts: reduce through shared memory
// straight between the tensors.
Status RunShmAllreduce(const CollectiveContext& ctx, const Response& resp,
                       std::vector<TensorEntry>& entries) {
  std::vector<Span> spans;
  spans.reserve(entries.size());
  for (auto& e : entries) {
    Span s{static_cast<const char*>(e.input), static_cast<char*>(e.output), e.NumBytes()};
    if (resp.prescale != 1.0 && s.bytes > 0) {
      // Scale a copy (the output), never the caller's input.
      if (s.in != s.out) std::memcpy(s.out, s.in, s.bytes);
      ScaleBuffer(s.out, e.NumElements(), resp.dtype, resp.prescale);
      s.in = s.out;
    }
    spans.push_back(s);
  }
  const int size = AverageDivisor(resp, ctx.mpi->size());
  const bool average = resp.reduce_op == ReduceOp::kAverage;
  ReduceSpec spec{resp.dtype, resp.reduce_op, resp.postscale, 1};
  if (average && IsFloatingPoint(resp.dtype)) spec.postscale /= size;
  if (average && !IsFloatingPoint(resp.dtype)) spec.integer_divisor = size;
  int64_t bytes = 0;
  for (const Span& s : spans) bytes += s.bytes;
  if (!ctx.hosts && UseSmallShmAllreduce(*ctx.shm, bytes)) return ShmSmallAllreduce(ctx.shm, spans, spec);
  if (!ctx.hosts && UseSingleCopy(*ctx.shm, spans.size(), bytes)) {
    return ShmSingleCopyAllreduce(ctx.shm, spans, spec);
  }
  // Across hosts every host must cut the buffer alike: the whole area.
  if (ctx.hosts) {
    return ShmAllreduce(ctx.shm, spans, spec, CrossHostAllreduce(*ctx.hosts, resp.dtype, resp.reduce_op));
  }
  // Inside one host the chunk, and whether to stage at all, suit whether
  // the local ranks' cores share a cache (measured now: they move). An
  // allreduce that large hands off between the ranks' threads dozens of
  // times: each keeps to a CPU of its own meanwhile (cpu_placement.h).
  std::optional<KeptOnHomeCpu> kept;
  if (bytes > static_cast<int64_t>(ctx.shm->area_bytes())) {
    kept.emplace(ctx.shm->cpu_home());
    if (kept->kept()) ctx.shm->CountKeptOnCpuRun();
  }
  bool cores_apart = false;
  const size_t chunk_bytes = ctx.shm->ChunkBytesFor(bytes, &cores_apart);
  if (chunk_bytes == 0) return PeerLostStatus();  // a local rank died during the measurement
  if (UseSingleCopy(*ctx.shm, spans.size(), bytes, cores_apart)) {
    return ShmSingleCopyAllreduce(ctx.shm, spans, spec);
  }
  return ShmAllreduce(ctx.shm, spans, spec, AcrossHosts(), chunk_bytes);
}

Status RunAllreduce(const CollectiveContext& ctx, const Response& resp,
                    std::vector<TensorEntry>& entries) {
  if (resp.reduce_op == ReduceOp::kAdasum) return RunAdasum(ctx, resp, entries);
  if (ctx.shm != nullptr) {  // one node, or hierarchical
    MarkPhase(ctx, "ALLREDUCE");
    return RunShmAllreduce(ctx, resp, entries);
  }
  const size_t elem = DataTypeSize(resp.dtype);
  char* buf;
  int64_t count = 0;
  if (entries.size() == 1) {
    MarkPhase(ctx, "ALLREDUCE");
    TensorEntry& e = entries[0];
    buf = static_cast<char*>(e.output);
    count = e.NumElements();
    if (e.input != e.output && count > 0) std::memcpy(buf, e.input, count * elem);
  } else {
    MarkPhase(ctx, kMemcpyIn);
    for (auto& e : entries) count += e.NumElements();
    buf = ctx.scratch->Get(count * elem);
    Status agreed = AgreeToProceed(
        ctx, resp, buf ? Status::OK() : Status::Unknown("no scratch memory for the fused batch"));
    if (!agreed.ok()) return agreed;
    int64_t offset = 0;
    for (auto& e : entries) {
      std::memcpy(buf + offset, e.input, e.NumBytes());
      offset += e.NumBytes();
    }
  }

  if (entries.size() > 1) MarkPhase(ctx, "ALLREDUCE");
  ScaleBuffer(buf, count, resp.dtype, resp.prescale);
  int rc = MpiAllreduceLarge(buf, count, MpiDatatype(resp.dtype), elem,
                             MpiReduceOp(resp.reduce_op, resp.dtype), ctx.mpi->comm());
  if (rc != MPI_SUCCESS) return Status::Unknown("MPI_Allreduce failed with code " + std::to_string(rc));
  ApplyPostscale(buf, count, resp, ctx.mpi->size());

  if (entries.size() > 1) {
    MarkPhase(ctx, kMemcpyOut);
    int64_t offset = 0;
    for (auto& e : entries) {
      std::memcpy(e.output, buf + offset, e.NumBytes());
      offset += e.NumBytes();
    }
  }
  return Status::OK();
}

}  // namespace tf_ring
