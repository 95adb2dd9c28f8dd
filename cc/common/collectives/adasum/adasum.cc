// Adasum (Maleki et al., "Scaling Distributed Training with Adaptive
// Summation", MLSys 2021) over MPI, for a power-of-two number of ranks.
//
// Two vectors combine as
//   adasum(a, b) = (1 - a.b / (2|a|^2)) a + (1 - a.b / (2|b|^2)) b,
// applied as a tree: ranks pair at distance 1, 2, 4, ... and each level
// combines the results of two neighbouring blocks of ranks. The vector is
// halved at every level (recursive vector halving, distance doubling): a
// pair swaps halves of its current segment, so each rank combines only its
// own part, and the dot product and norms of the whole vectors are summed
// over the block of ranks that holds them. After the last level every rank
// holds 1/size of the result; the halving is then undone (distance halving)
// so every rank ends with all of it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <vector>

#include "common/collectives/collectives.h"
#include "common/base/half.h"
#include "common/reduction/scale.h"

namespace tf_ring {

namespace {

template <typename T>
MPI_Datatype MpiTypeOf();
template <>
MPI_Datatype MpiTypeOf<float>() { return MPI_FLOAT; }
template <>
MPI_Datatype MpiTypeOf<double>() { return MPI_DOUBLE; }

// MPI_Sendrecv with 64-bit counts, in int-sized pieces. The peer calls it
// with the two counts swapped, so both sides take the same number of rounds.
template <typename T>
int SendrecvLarge(const T* send, int64_t send_count, T* recv, int64_t recv_count, int peer, int tag,
                  MPI_Comm comm) {
  const int64_t k = kMpiChunkElements;
  const int64_t rounds = std::max(ChunkRounds(send_count, k), ChunkRounds(recv_count, k));
  for (int64_t i = 0; i < rounds; ++i) {
    const int rc = MPI_Sendrecv(send + i * k, static_cast<int>(ChunkAt(send_count, k, i)), MpiTypeOf<T>(),
                                peer, tag, recv + i * k, static_cast<int>(ChunkAt(recv_count, k, i)),
                                MpiTypeOf<T>(), peer, tag, comm, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return rc;
  }
  return MPI_SUCCESS;
}

// Sums `values` over the 2 * distance ranks of this rank's block by
// recursive doubling. Every rank adds the same pairs (a + b == b + a), so
// the whole block gets bit-identical sums.
int SumOverBlock(double* values, int n, int distance, int rank, MPI_Comm comm) {
  std::vector<double> theirs(n);
  for (int d = 1; d <= distance; d *= 2) {
    int rc = MPI_Sendrecv(values, n, MPI_DOUBLE, rank ^ d, 0, theirs.data(), n, MPI_DOUBLE,
                          rank ^ d, 0, comm, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return rc;
    for (int i = 0; i < n; ++i) values[i] += theirs[i];
  }
  return MPI_SUCCESS;
}

// `received` holds count / 2 + 1 elements.
template <typename T>
Status AdasumInPlace(T* data, int64_t count, T* received, const MpiContext& mpi) {
  const int size = mpi.size(), rank = mpi.rank();
  MPI_Comm comm = mpi.comm();
  std::vector<Segment> kept;  // my segment before each level, for the way back
  Segment mine{0, count};
  for (int distance = 1; distance < size; distance *= 2) {
    const int peer = rank ^ distance;
    const bool left = (rank & distance) == 0;  // my block is the left operand
    Segment keep, give;
    HalveSegment(mine, left, &keep, &give);
    kept.push_back(mine);
    // The peer holds the same segment and keeps the other half.
    int rc = SendrecvLarge(data + give.offset, give.count, received, keep.count, peer, 2, comm);
    if (rc != MPI_SUCCESS) return Status::Unknown("Adasum: MPI_Sendrecv failed");
    // Partial dot product and squared norms on my part of the two vectors.
    T* own = data + keep.offset;
    const T* other = received;
    double sums[3] = {0.0, 0.0, 0.0};  // a.b, |a|^2, |b|^2
    for (int64_t i = 0; i < keep.count; ++i) {
      const double x = own[i], y = other[i];
      sums[0] += x * y;
      sums[1] += x * x;
      sums[2] += y * y;
    }
    if (!left) std::swap(sums[1], sums[2]);
    if (SumOverBlock(sums, 3, distance, rank, comm) != MPI_SUCCESS)
      return Status::Unknown("Adasum: MPI_Sendrecv failed while summing dot products");
    // A zero vector contributes nothing, whatever its coefficient.
    const double ca = sums[1] > 0 ? 1.0 - sums[0] / (2.0 * sums[1]) : 1.0;
    const double cb = sums[2] > 0 ? 1.0 - sums[0] / (2.0 * sums[2]) : 1.0;
    const double c_own = left ? ca : cb, c_other = left ? cb : ca;
    for (int64_t i = 0; i < keep.count; ++i)
      own[i] = static_cast<T>(c_own * own[i] + c_other * other[i]);
    mine = keep;
  }
  // Undo the halving: swap finished segments with the same peers in reverse.
  for (int level = static_cast<int>(kept.size()) - 1; level >= 0; --level) {
    const int peer = rank ^ (1 << level);
    const Segment whole = kept[level];
    const Segment theirs = OtherPart(whole, mine);
    int rc = SendrecvLarge(data + mine.offset, mine.count, data + theirs.offset, theirs.count, peer, 3, comm);
    if (rc != MPI_SUCCESS) return Status::Unknown("Adasum: MPI_Sendrecv failed while gathering");
    mine = whole;
  }
  return Status::OK();
}

// Buffers one tensor's Adasum needs beyond its output, allocated before
// any data moves so a failure can be agreed (AgreeToProceed).
struct AdasumBuffers {
  std::vector<float> wide;        // float16: the tensor in float32
  std::vector<double> received64;  // the peer's half, by the type combined in
  std::vector<float> received32;
};

Status Allocate(DataType dtype, int64_t count, AdasumBuffers* b) {
  try {
    const size_t half = static_cast<size_t>(count / 2 + 1);
    if (dtype == DataType::kFloat64) {
      b->received64.resize(half);
    } else {
      b->received32.resize(half);
      if (dtype == DataType::kFloat16) b->wide.resize(static_cast<size_t>(count));
    }
  } catch (const std::bad_alloc&) {
    return Status::Unknown("no memory for Adasum's working buffers");
  }
  return Status::OK();
}

}  // namespace

Status RunAdasum(const CollectiveContext& ctx, const Response& resp,
                 std::vector<TensorEntry>& entries) {
  MarkPhase(ctx, "ALLREDUCE");
  // Never fused: the dot products belong to one tensor, so run them one by one.
  for (TensorEntry& e : entries) {
    const int64_t count = e.NumElements();
    if (resp.dtype != DataType::kFloat16 && resp.dtype != DataType::kFloat32 &&
        resp.dtype != DataType::kFloat64) {
      return Status::InvalidArgument(std::string("Adasum is not defined on dtype ") +
                                     DataTypeName(resp.dtype));
    }
    AdasumBuffers b;
    Status s = AgreeToProceed(ctx, resp, Allocate(resp.dtype, count, &b));
    if (!s.ok()) return s;
    if (e.input != e.output && count > 0) std::memcpy(e.output, e.input, e.NumBytes());
    ScaleBuffer(e.output, count, resp.dtype, resp.prescale);
    if (resp.dtype == DataType::kFloat32) {
      s = AdasumInPlace(static_cast<float*>(e.output), count, b.received32.data(), *ctx.mpi);
    } else if (resp.dtype == DataType::kFloat64) {
      s = AdasumInPlace(static_cast<double*>(e.output), count, b.received64.data(), *ctx.mpi);
    } else {
      // Combine in float32; float16 would lose the small corrections.
      uint16_t* half = static_cast<uint16_t*>(e.output);
      for (int64_t i = 0; i < count; ++i) b.wide[i] = HalfToFloat(half[i]);
      s = AdasumInPlace(b.wide.data(), count, b.received32.data(), *ctx.mpi);
      for (int64_t i = 0; i < count; ++i) half[i] = FloatToHalf(b.wide[i]);
    }
    if (!s.ok()) return s;
    ScaleBuffer(e.output, count, resp.dtype, resp.postscale);
  }
  return Status::OK();
}

}  // namespace tf_ring
